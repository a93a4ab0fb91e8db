//! The component runtime, linked into every component: invoking another
//! component (client side) and serving invocations (server side), with
//! thread-migration semantics and the stack cache's protocol (TMEM paper
//! §IV-C, Figure 4).
//!
//! Invocation, client side:
//! 1. pop a context off the server's freelist (lock-free); if empty,
//!    [`tmem_get`] (relinquish bit, PI on a holder, sleep);
//! 2. mark the context's PI word as owned by the context's thread, write
//!    the function, up to six argument words and the caller's priority
//!    into the slot, set `call = REQ` and wake the context;
//! 3. wait for `call = DONE` (spin briefly, then FUTEX_WAIT), read the
//!    result, push the context back, and if the relinquish bit is set call
//!    [`tmem_put`].
//!
//! Server side: one thread per context, each with its own stack, parked on
//! its slot's `call` word. On REQ it takes the caller's priority (the
//! migrating schedulable entity; one sched_setscheduler only when the
//! priority differs from the last call's), runs the function, releases the
//! PI word (a CAS, or FUTEX_UNLOCK_PI when a blocked caller is queued on
//! it, which also ends its boost) and sets DONE.
//!
//! A server that dies mid-call: the manager marks the region dead and sets
//! every busy slot's `call` to DEAD; the waiting caller also rechecks the
//! server's pid every [`LIVENESS_CHECK`] on its own, so it returns
//! [`Error::ServerDied`] even if the manager is gone.
//!
//! Lock order: none; the only blocking is on futex words of the region.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mantle_abi::comp::*;
use mantle_sys::os::gettid;
use mantle_sys::pifutex::{self, Sched};
use mantle_sys::shm::futex_wait;

use crate::region::Region;
use crate::Error;

/// How often a caller blocked on a call or on an empty cache looks at the
/// server's liveness by itself.
pub const LIVENESS_CHECK: Duration = Duration::from_millis(20);

/// Spins of a caller on its slot before it sleeps in FUTEX_WAIT (see
/// docs/comp.md "Handoff": measured in bench/components). Default 0.
static SPIN: AtomicU32 = AtomicU32::new(0);

/// Sets the caller-side spin count (process-wide).
pub fn set_spin(n: u32) {
    SPIN.store(n, Relaxed);
}

thread_local! {
    /// While a context thread runs a call: the tid of the thread the call
    /// runs for (the first caller of the chain); 0 otherwise.
    static ORIGIN: Cell<u32> = const { Cell::new(0) };
    static MY_TID: Cell<u32> = const { Cell::new(0) };
}

pub(crate) fn my_tid() -> u32 {
    MY_TID.with(|t| {
        if t.get() == 0 {
            t.set(gettid());
        }
        t.get()
    })
}

/// The thread this thread works for now: the origin of the call a
/// context thread runs, or the thread itself. Block and tardiness records
/// are kept under it, so that a real-time thread is one thread of the
/// policy's T in every component its invocations reach.
pub fn origin_tid() -> u32 {
    match ORIGIN.with(|o| o.get()) {
        0 => my_tid(),
        o => o,
    }
}

pub fn encode_prio(s: Sched) -> u32 {
    let v = if s.policy == libc::SCHED_FIFO || s.policy == libc::SCHED_RR {
        s.value.clamp(1, 99) as u32
    } else {
        (s.value.clamp(-20, 19) + 20) as u32
    };
    (s.policy as u32) << PRIO_POLICY_SHIFT | v
}

pub fn decode_prio(p: u32) -> Option<Sched> {
    let policy = (p >> PRIO_POLICY_SHIFT) as i32;
    let v = (p & 0xffff) as i32;
    match policy {
        libc::SCHED_FIFO | libc::SCHED_RR if (1..=99).contains(&v) => {
            Some(Sched { policy, value: v })
        }
        libc::SCHED_OTHER | libc::SCHED_BATCH | libc::SCHED_IDLE if v < 40 => Some(Sched {
            policy,
            value: v - 20,
        }),
        _ => None,
    }
}

/// The caller's priority now: read at every invocation (one
/// sched_getattr), so a thread that changes its scheduling between calls
/// (from Rust or from C, through libmantle) is followed at once.
fn my_prio() -> u32 {
    pifutex::self_sched().map(encode_prio).unwrap_or(0)
}

/// Kept for callers of earlier versions: the priority is no longer
/// cached, so there is nothing to forget.
pub fn priority_changed() {}

/// Takes a PI word for `me`: a CAS from 0, or, while another thread holds
/// it for a moment (a blocked caller that was handed it), FUTEX_LOCK_PI,
/// which also boosts that thread. A word left by a thread that died is
/// taken over. `give_up` is asked at each timeout (the server died).
fn take_pi(word: &AtomicU32, me: u32, give_up: &dyn Fn() -> bool) -> Result<(), ()> {
    loop {
        let cur = match word.compare_exchange(0, me, AcqRel, Relaxed) {
            Ok(_) => return Ok(()),
            Err(cur) => cur,
        };
        match pifutex::lock_pi(word, Some(LIVENESS_CHECK)) {
            Ok(true) => {
                // ours; a dead previous owner leaves FUTEX_OWNER_DIED,
                // which our own unlock clears
                return Ok(());
            }
            Ok(false) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                // the owner's tid no longer exists: take the word over
                if word.compare_exchange(cur, me, AcqRel, Relaxed).is_ok() {
                    return Ok(());
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        if give_up() {
            return Err(());
        }
    }
}

/// Whether the process behind a pidfd is still running: a pidfd polls
/// readable once the process exited, zombie or not (kill(pid, 0) would
/// still succeed on an unreaped zombie).
fn running(pidfd: &OwnedFd) -> bool {
    let mut p = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    !matches!(mantle_sys::supervise::poll(&mut p, 0), Ok(n) if n > 0 && p[0].revents != 0)
}

/// The server's liveness, from a pidfd opened once per instance (so a
/// reused pid is never mistaken for the server; a restarted server has a
/// new epoch and a new pid).
struct Liveness {
    pidfd: Mutex<Option<(u32, Option<OwnedFd>)>>,
}

impl Liveness {
    fn alive(&self, r: &Region) -> bool {
        if r.dead() {
            return false;
        }
        let epoch = r.epoch();
        let mut g = self.pidfd.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|(e, fd)| *e != epoch || fd.is_none()) {
            let pid = r.server_pid();
            let fd = (pid != 0)
                .then(|| mantle_sys::os::pidfd_open(pid, false).ok())
                .flatten();
            *g = Some((epoch, fd));
        }
        match g.as_ref().and_then(|(_, fd)| fd.as_ref()) {
            Some(fd) => running(fd),
            // no pidfd: the pid is gone already, or not set yet
            None => {
                r.server_pid() != 0
                    && mantle_sys::supervise::kill(r.server_pid() as i32, 0).unwrap_or(true)
            }
        }
    }
}

/// A server this component may invoke.
#[derive(Clone)]
pub struct Server {
    pub name: String,
    region: Arc<Region>,
    live: Arc<Liveness>,
}

impl Server {
    pub fn new(name: &str, region: Arc<Region>) -> Server {
        Server {
            name: name.to_string(),
            region,
            live: Arc::new(Liveness {
                pidfd: Mutex::new(None),
            }),
        }
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Invokes function `func` of the server with up to six words; the
    /// calling thread blocks until it returns.
    pub fn invoke(&self, func: u32, args: &[u64]) -> Result<i64, Error> {
        if args.len() > NARGS {
            return Err(Error::Args(args.len()));
        }
        let r = &*self.region;
        let epoch = r.epoch();
        let i = match r.pop()? {
            Some(i) => i,
            None => tmem_get(r, &|| self.live.alive(r))?,
        };
        // hold_pi: ours from the pop until after the push, so that a
        // caller blocked on the empty cache boosts this thread through
        // the whole hold, the push back included (the paper's bound: a
        // high-priority caller waits at most the holder's remaining
        // critical section, whatever runs at a middle priority)
        let me = my_tid();
        let hold = r.s32(i, CTX_HOLD_PI);
        if take_pi(hold, me, &|| !self.live.alive(r)).is_err() {
            return Err(Error::ServerDied(self.name.clone()));
        }
        let mut res = self.call_on(i, func, args);
        if r.epoch() != epoch {
            // the server was restarted under this call: its context
            // belongs to the new instance now, never push it back
            res = Err(Error::ServerDied(self.name.clone()));
        }
        if !matches!(res, Err(Error::ServerDied(_))) {
            r.push(i);
            if r.h32(HDR_RELINQUISH).load(Acquire) & REL_STACK != 0 {
                tmem_put(r);
            }
        }
        // after the push: a waiter handed the word finds the context free
        let _ = pifutex::unlock_pi(hold, me);
        res
    }

    /// Takes a context for good: the paper's "pre-TMEM" invocation with a
    /// preallocated context per caller (no freelist on the path), kept
    /// for comparison (bench/components).
    pub fn reserve(&self) -> Result<Reserved, Error> {
        let i = self
            .region
            .pop()?
            .ok_or_else(|| Error::Spec(format!("{}: no free context to reserve", self.name)))?;
        Ok(Reserved {
            server: self.clone(),
            slot: i,
        })
    }

    fn call_on(&self, i: u32, func: u32, args: &[u64]) -> Result<i64, Error> {
        let r = &*self.region;
        if r.dead() {
            return Err(Error::ServerDied(self.name.clone()));
        }
        let ctid = r.s32(i, CTX_TID).load(Acquire);
        if ctid == 0 {
            return Err(Error::Corrupt(format!(
                "context {i} on the freelist has no thread"
            )));
        }
        r.s32(i, CTX_USED).store(1, Relaxed);
        r.s64(i, CTX_SINCE).store(pifutex::monotonic_ns(), Relaxed);
        r.s32(i, CTX_CALLER_TID).store(my_tid(), Relaxed);
        r.s32(i, CTX_CALLER_PID).store(std::process::id(), Relaxed);
        r.s32(i, CTX_PRIO).store(my_prio(), Relaxed);
        r.s32(i, CTX_ORIGIN).store(origin_tid(), Relaxed);
        r.s32(i, CTX_FUNC).store(func, Relaxed);
        for k in 0..NARGS {
            r.s64(i, CTX_ARGS + 8 * k)
                .store(args.get(k).copied().unwrap_or(0), Relaxed);
        }
        self.own_pi_for(i, ctid)?;
        let call = r.s32(i, CTX_CALL);
        call.store(CALL_REQ, Release);
        pifutex::wake(call, 2);
        let spin = SPIN.load(Relaxed);
        let mut k = 0;
        while k < spin && call.load(Acquire) == CALL_REQ {
            std::hint::spin_loop();
            k += 1;
        }
        let pi = r.s32(i, CTX_PI);
        loop {
            match call.load(Acquire) {
                CALL_DONE => break,
                CALL_REQ => {
                    // wait on the context's PI word, not on the call word:
                    // the kernel runs the context thread at our priority
                    // from the moment we block (a free context's thread
                    // may still have its last caller's), and hands us the
                    // word when it sets DONE
                    match pifutex::lock_pi(pi, Some(LIVENESS_CHECK)) {
                        Ok(true) => {
                            let _ = pifutex::unlock_pi(pi, my_tid());
                            // the context sets DONE before it lets go: a
                            // word free with the call still REQ means its
                            // thread died (the kernel gave us the word) or
                            // the server lies; look, never spin
                            if call.load(Acquire) == CALL_REQ
                                && (!self.live.alive(r)
                                    || futex_wait(call, CALL_REQ, Duration::from_millis(1))
                                        && !self.live.alive(r))
                            {
                                return Err(Error::ServerDied(self.name.clone()));
                            }
                        }
                        Ok(false) => {
                            if !self.live.alive(r) {
                                return Err(Error::ServerDied(self.name.clone()));
                            }
                        }
                        // the owner is gone (ESRCH) or the word is not a
                        // PI word any more: the server is dying or lying
                        Err(_) => {
                            if futex_wait(call, CALL_REQ, Duration::from_millis(1))
                                && !self.live.alive(r)
                            {
                                return Err(Error::ServerDied(self.name.clone()));
                            }
                        }
                    }
                }
                CALL_DEAD => return Err(Error::ServerDied(self.name.clone())),
                c => return Err(Error::Corrupt(format!("slot {i} call word {c}"))),
            }
        }
        let ret = r.s64(i, CTX_RET).load(Relaxed) as i64;
        let status = r.s32(i, CTX_STATUS).load(Relaxed);
        call.store(CALL_IDLE, Relaxed);
        if status != 0 {
            return Err(Error::Remote(status as i32));
        }
        Ok(ret)
    }

    /// Makes the context's thread the owner of its PI word for the call,
    /// so that a caller blocked on the empty cache can boost it. The word
    /// is 0 except in the short time a blocked caller holds it after the
    /// previous call (tmem_get takes and drops it): then wait for it with
    /// FUTEX_LOCK_PI (which boosts that caller) and retry.
    fn own_pi_for(&self, i: u32, ctid: u32) -> Result<(), Error> {
        let r = &*self.region;
        let pi = r.s32(i, CTX_PI);
        loop {
            match pi.compare_exchange(0, ctid, AcqRel, Relaxed) {
                Ok(_) => return Ok(()),
                Err(_) if r.dead() => return Err(Error::ServerDied(self.name.clone())),
                Err(_) => {
                    if let Ok(true) = pifutex::lock_pi(pi, Some(LIVENESS_CHECK)) {
                        let _ = pifutex::unlock_pi(pi, my_tid());
                    }
                    if !self.live.alive(r) {
                        return Err(Error::ServerDied(self.name.clone()));
                    }
                }
            }
        }
    }
}

/// A context held by one caller (see [`Server::reserve`]); returned to
/// the freelist on drop.
pub struct Reserved {
    server: Server,
    slot: u32,
}

impl Reserved {
    pub fn invoke(&self, func: u32, args: &[u64]) -> Result<i64, Error> {
        if args.len() > NARGS {
            return Err(Error::Args(args.len()));
        }
        self.server.call_on(self.slot, func, args)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.server.region.dead() {
            self.server.region.push(self.slot);
        }
    }
}

/// The empty-cache path (paper §IV-B `tmem_get`): sets the relinquish bit,
/// blocks with priority inheritance on a thread holding a context in the
/// component, and returns a context once one is free.
/// `alive` says whether the server still runs.
pub fn tmem_get(r: &Region, alive: &dyn Fn() -> bool) -> Result<u32, Error> {
    if r.dead() {
        return Err(Error::ServerDied(format!("pid {}", r.server_pid())));
    }
    let t0 = pifutex::monotonic_ns();
    r.h32(HDR_WAITERS).fetch_add(1, AcqRel);
    r.h32(HDR_BLOCKS).fetch_add(1, Relaxed);
    let res = (|| loop {
        r.h32(HDR_RELINQUISH).fetch_or(REL_STACK, AcqRel);
        let seq = r.h32(HDR_FREE_SEQ).load(Acquire);
        if let Some(i) = r.pop()? {
            return Ok(i);
        }
        if r.dead() {
            return Err(Error::ServerDied(format!("pid {}", r.server_pid())));
        }
        // single-unit PIP: pick a holder and block on its PI word; the
        // kernel lends it our priority until it releases the context.
        // The kernel lends our priority to the caller holding it, and
        // through the PI word it waits on, to the context thread: both
        // the rest of the call and the push back run boosted.
        let me = my_tid();
        // the "w/o PI" variants (the manager sets nopi): no boost, wait
        let pi = r.h32(HDR_NOPI).load(Relaxed) == 0;
        let handed = match pick_holder(r, me).filter(|_| pi) {
            Some(h) => {
                let pi = r.s32(h, CTX_HOLD_PI);
                match pifutex::lock_pi(pi, Some(LIVENESS_CHECK)) {
                    Ok(true) => {
                        let _ = pifutex::unlock_pi(pi, me);
                        true
                    }
                    _ => false,
                }
            }
            None => false,
        };
        // handed the word: the holder pushed the context before it let
        // go. Otherwise (no holder to boost: reserved contexts, a removal
        // under way) wait for tmem_put (priority-ordered wake).
        if !handed && r.h32(HDR_FREE_SEQ).load(Acquire) == seq {
            futex_wait(r.h32(HDR_FREE_SEQ), seq, Duration::from_millis(2));
        }
        if !alive() {
            return Err(Error::ServerDied(format!("pid {}", r.server_pid())));
        }
    })();
    if r.h32(HDR_WAITERS).fetch_sub(1, AcqRel) == 1 {
        r.h32(HDR_RELINQUISH).fetch_and(!REL_STACK, AcqRel);
    }
    let ns = pifutex::monotonic_ns().saturating_sub(t0);
    r.h64(HDR_BLOCK_NS).fetch_add(ns, Relaxed);
    r.record_block(origin_tid(), ns);
    res
}

/// A busy context held by a caller other than `me` (its hold word has
/// an owner): the holder to boost. A thread that holds every context
/// itself (a nested call into the same server) has nobody to wait for.
fn pick_holder(r: &Region, me: u32) -> Option<u32> {
    (0..r.nctx()).find(|&i| {
        let owner = r.s32(i, CTX_HOLD_PI).load(Relaxed) & pifutex::FUTEX_TID_MASK;
        r.s32(i, CTX_OWN).load(Relaxed) == OWN_BUSY && owner != 0 && owner != me
    })
}

/// The release path (`tmem_put`): wakes the highest-priority thread
/// blocked in [`tmem_get`]; the last waiter clears the relinquish bit when
/// it leaves.
pub fn tmem_put(r: &Region) {
    r.h32(HDR_FREE_SEQ).fetch_add(1, AcqRel);
    pifutex::wake(r.h32(HDR_FREE_SEQ), 1);
}

/// One exported function: six words in, one word out.
pub type Func = Arc<dyn Fn(&[u64; NARGS]) -> i64 + Send + Sync>;

/// A component's interface: function ids are indices.
#[derive(Default, Clone)]
pub struct Interface {
    funcs: Vec<Func>,
}

impl Interface {
    pub fn new() -> Interface {
        Interface::default()
    }
    pub fn func(mut self, f: impl Fn(&[u64; NARGS]) -> i64 + Send + Sync + 'static) -> Self {
        self.funcs.push(Arc::new(f));
        self
    }
}

/// Starts one thread per context slot of the component's own region
/// (each with `stack` bytes of stack) and returns once all are parked.
pub fn serve(region: Arc<Region>, iface: Interface, stack: usize) -> Result<(), Error> {
    let iface = Arc::new(iface);
    for i in 0..region.nctx() {
        let (r, f) = (region.clone(), iface.clone());
        std::thread::Builder::new()
            .name(format!("ctx{i}"))
            .stack_size(stack)
            .spawn(move || context_loop(&r, i, &f))
            .map_err(Error::sys("spawn context"))?;
    }
    while region.h32(HDR_READY).load(Acquire) < region.nctx() {
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// What a parked context keeps of its stack below its idle frame: the
/// futex wait's own frames and the kernel's signal frame fit in it.
const STACK_MARGIN: usize = 16 * 1024;

fn context_loop(r: &Region, i: u32, iface: &Interface) {
    let tid = my_tid();
    r.s32(i, CTX_TID).store(tid, Release);
    r.h32(HDR_READY).fetch_add(1, AcqRel);
    let call = r.s32(i, CTX_CALL);
    let mut cur = my_prio();
    // whether the stack was given back since the last call
    let mut trimmed = false;
    loop {
        let c = call.load(Acquire);
        if c != CALL_REQ {
            if r.dead() {
                return;
            }
            // out of the cache (never added, or removed by the manager,
            // which wakes us): the stack's pages go back to the kernel,
            // so a^j falling really lowers the component's memory
            if !trimmed && r.s32(i, CTX_OWN).load(Acquire) == OWN_PARKED {
                let _ = mantle_sys::stack::release_unused(STACK_MARGIN);
                trimmed = true;
                r.h32(HDR_TRIMS).fetch_add(1, Relaxed);
            }
            futex_wait(call, c, Duration::from_secs(1));
            continue;
        }
        trimmed = false;
        let want = r.s32(i, CTX_PRIO).load(Relaxed);
        if want != cur {
            if let Some(s) = decode_prio(want) {
                if pifutex::set_self_sched(s).is_ok() {
                    cur = want;
                }
            }
        }
        let mut args = [0u64; NARGS];
        for (k, a) in args.iter_mut().enumerate() {
            *a = r.s64(i, CTX_ARGS + 8 * k).load(Relaxed);
        }
        let func = r.s32(i, CTX_FUNC).load(Relaxed);
        // a claim of the caller's: only used as a key for statistics
        ORIGIN.with(|o| o.set(r.s32(i, CTX_ORIGIN).load(Relaxed)));
        let (ret, status) = match iface.funcs.get(func as usize) {
            Some(f) => (f(&args), 0),
            None => (0, libc::ENOSYS as u32),
        };
        ORIGIN.with(|o| o.set(0));
        r.s64(i, CTX_RET).store(ret as u64, Relaxed);
        r.s32(i, CTX_STATUS).store(status, Relaxed);
        // DONE before the PI word: the caller, handed the word, finds the
        // result at once (were it the other way round, a caller of our own
        // base priority could spin on REQ while we wait for the CPU). A
        // caller on its fallback wait (a lying PI word) polls every 1 ms.
        call.store(CALL_DONE, Release);
        let _ = pifutex::unlock_pi(r.s32(i, CTX_PI), tid);
    }
}

/// The periodic-task helper (TMEM paper §V: the policy needs each
/// real-time thread's tardiness): a thread releases a job every `period`,
/// its deadline the next release; [`Periodic::job_done`] reports the job's
/// tardiness (max(0, completion − deadline)) in the component's table,
/// under the thread's origin tid, and sleeps until the next release (a
/// job that ends past it starts the next one at once). The manager reads
/// the reports at each policy run, and takes only those of threads that
/// run a real-time policy then.
pub struct Periodic {
    cbufs: Arc<crate::cbuf::Cbufs>,
    period_ns: u64,
    release: u64,
}

impl Periodic {
    /// The first job is released now.
    pub fn new(cbufs: Arc<crate::cbuf::Cbufs>, period: Duration) -> Periodic {
        Periodic {
            cbufs,
            period_ns: (period.as_nanos() as u64).max(1),
            release: pifutex::monotonic_ns(),
        }
    }

    /// The current job's release and deadline (CLOCK_MONOTONIC ns).
    pub fn window(&self) -> (u64, u64) {
        (self.release, self.release + self.period_ns)
    }

    /// Ends the current job: reports it, waits for the next release.
    /// Returns the job's tardiness.
    pub fn job_done(&mut self) -> Duration {
        let now = pifutex::monotonic_ns();
        let tardy = now.saturating_sub(self.release + self.period_ns);
        self.cbufs.report_job(tardy);
        self.release += self.period_ns;
        let now = pifutex::monotonic_ns();
        if self.release > now {
            std::thread::sleep(Duration::from_nanos(self.release - now));
        }
        Duration::from_nanos(tardy)
    }
}

/// For a thread without a period (the paper's Table IV reading): its
/// tardiness is its response time above its own average so far.
pub struct Responses {
    cbufs: Arc<crate::cbuf::Cbufs>,
    jobs: u64,
    total_ns: u128,
}

impl Responses {
    pub fn new(cbufs: Arc<crate::cbuf::Cbufs>) -> Responses {
        Responses {
            cbufs,
            jobs: 0,
            total_ns: 0,
        }
    }

    /// Reports one response; returns the tardiness counted for it.
    pub fn job_done(&mut self, response: Duration) -> Duration {
        let ns = response.as_nanos();
        let avg = self.total_ns.checked_div(self.jobs as u128).unwrap_or(ns);
        let tardy = ns.saturating_sub(avg).min(u64::MAX as u128) as u64;
        self.jobs += 1;
        self.total_ns += ns;
        self.cbufs.report_job(tardy);
        Duration::from_nanos(tardy)
    }
}

/// What a component process receives from the manager (environment set
/// by [`crate::manager`]): its own region and the servers it may invoke.
pub struct Env {
    pub name: String,
    pub own: Arc<Region>,
    pub servers: BTreeMap<String, Server>,
    pub cbufs: Arc<crate::cbuf::Cbufs>,
}

pub const ENV_NAME: &str = "MANTLE_COMP_NAME";
pub const ENV_REGION: &str = "MANTLE_COMP_REGION";
pub const ENV_SERVERS: &str = "MANTLE_COMP_SERVERS";
pub const ENV_CBUF_SOCK: &str = "MANTLE_COMP_CBUF_SOCK";
pub const ENV_CBUF_TABLE: &str = "MANTLE_COMP_CBUF_TABLE";

fn env_fd(v: &str) -> Result<OwnedFd, Error> {
    let fd: i32 = v
        .parse()
        .map_err(|_| Error::Spec(format!("bad fd {v:?} in the environment")))?;
    if fd < 3 {
        return Err(Error::Spec(format!("fd {fd} in the environment")));
    }
    // check it is open before taking ownership
    // SAFETY: F_GETFD on an integer; no memory.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(Error::Spec(format!(
            "fd {fd} from the environment is not open"
        )));
    }
    // SAFETY: the manager passed this fd for us alone; we take it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Env {
    /// Reads the environment the manager set for this component.
    pub fn from_env() -> Result<Env, Error> {
        // before anything of the manager's is mapped: no sibling (same
        // uid, no CAP_SYS_PTRACE) may read our memory or our fds
        mantle_sys::supervise::set_not_dumpable().map_err(Error::sys("PR_SET_DUMPABLE"))?;
        let var = |k: &str| {
            std::env::var(k)
                .map_err(|_| Error::Spec(format!("{k} not set: not started by `mantle comp up`")))
        };
        let name = var(ENV_NAME)?;
        let own = Arc::new(Region::attach(env_fd(&var(ENV_REGION)?)?)?);
        let mut servers = BTreeMap::new();
        for item in var(ENV_SERVERS)?.split(',').filter(|s| !s.is_empty()) {
            let (n, fd) = item
                .split_once('=')
                .ok_or_else(|| Error::Spec(format!("bad {ENV_SERVERS} item {item:?}")))?;
            let r = Arc::new(Region::attach(env_fd(fd)?)?);
            servers.insert(n.to_string(), Server::new(n, r));
        }
        let cbufs = Arc::new(crate::cbuf::Cbufs::new(
            env_fd(&var(ENV_CBUF_SOCK)?)?,
            env_fd(&var(ENV_CBUF_TABLE)?)?,
        )?);
        Ok(Env {
            name,
            own,
            servers,
            cbufs,
        })
    }

    /// A periodic-task helper for the calling thread (see [`Periodic`]).
    pub fn periodic(&self, period: Duration) -> Periodic {
        Periodic::new(self.cbufs.clone(), period)
    }

    /// A response-time reporter for a thread without a period.
    pub fn responses(&self) -> Responses {
        Responses::new(self.cbufs.clone())
    }

    pub fn server(&self, name: &str) -> Result<&Server, Error> {
        self.servers
            .get(name)
            .ok_or_else(|| Error::NotAllowed(self.name.clone(), name.to_string()))
    }

    /// Serves `iface` on the component's contexts, then parks the calling
    /// thread for good (the process lives until the manager ends it).
    pub fn serve_forever(&self, iface: Interface) -> Result<(), Error> {
        serve(self.own.clone(), iface, 256 * 1024)?;
        loop {
            std::thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_round_trip_for_every_value() {
        for v in 1..=99 {
            for policy in [libc::SCHED_FIFO, libc::SCHED_RR] {
                let s = Sched { policy, value: v };
                assert_eq!(decode_prio(encode_prio(s)), Some(s));
            }
        }
        for v in -20..=19 {
            let s = Sched {
                policy: libc::SCHED_OTHER,
                value: v,
            };
            assert_eq!(decode_prio(encode_prio(s)), Some(s));
        }
        assert_eq!(
            decode_prio((libc::SCHED_FIFO as u32) << PRIO_POLICY_SHIFT),
            None
        );
        assert_eq!(decode_prio(40), None);
        assert_eq!(decode_prio(77 << PRIO_POLICY_SHIFT), None);
    }

    #[test]
    fn in_process_invocations_run_on_contexts_and_return() {
        let r = Arc::new(Region::create("t", 3).unwrap());
        r.h32(HDR_SERVER_PID).store(std::process::id(), Relaxed);
        serve(
            r.clone(),
            Interface::new().func(|a| (a[0] + a[5]) as i64),
            64 * 1024,
        )
        .unwrap();
        for i in 0..3 {
            r.push(i);
        }
        let s = Server::new("t", r.clone());
        for k in 0..1000u64 {
            assert_eq!(s.invoke(0, &[k, 0, 0, 0, 0, 7]).unwrap(), k as i64 + 7);
        }
        assert!(matches!(s.invoke(1, &[]), Err(Error::Remote(libc::ENOSYS))));
        assert!(matches!(s.invoke(0, &[0; 7]), Err(Error::Args(7))));
        assert_eq!(r.counters().free, 3);
    }
}

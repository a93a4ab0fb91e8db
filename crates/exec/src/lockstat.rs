//! Locks that count: the executive's locks on N CPUs (issue 31), each with
//! statistics that are always on, and, in debug builds, a lock-order check.
//!
//! Statistics, per lock, as `perf lock contention` shows a kernel lock's:
//! acquisitions, contended acquisitions (the lock was held when asked
//! for), total and longest wait, total and longest hold, and a log2
//! histogram of hold times, from which the multicore model
//! (`mantle-lockmodel`) draws its hold times.
//!
//! Cost (issue 29): the counts are exact and every contended acquisition's
//! wait is timed (a waiter has time to spare); hold times are **sampled**:
//! one acquisition in [`HOLD_SAMPLE_EVERY`] on average, chosen by a
//! per-thread pseudo-random draw, is timed with two monotonic clock reads.
//! Timing every hold cost two clock reads per acquisition (32 ns each on
//! this VM, measured; rdtsc is 19 ns, not enough cheaper) on the four
//! acquisitions of a protected call: about 0.25 us on a ~2.5 us round
//! trip, the protected path's regression after the N-CPU merge. A random
//! draw, not every k-th acquisition, so that a lock taken in a fixed
//! pattern (a long hold, then a short one) is not sampled on one kind
//! only. The counters are written only by the holder, under the lock, so
//! they are plain loads and stores on atomics (no locked instruction);
//! readers ([`StatLock::stats`]) see each counter whole. What the
//! sampling changes: `hold_ns` is the timed holds' total scaled by
//! acquisitions / timed holds (an unbiased estimate), `hold_hist` counts
//! the timed holds only (a distribution, `timed_holds` in all), and
//! `max_hold_ns` is the longest *timed* hold (a lower bound). A coarse
//! clock (CLOCK_MONOTONIC_COARSE, one tick = 4 ms at HZ=250) cannot time
//! holds of a few µs at all.
//!
//! Lock order: every lock has a rank; a thread may take a lock only if
//! its rank is greater than the rank of every lock the thread holds. In
//! debug builds each acquisition checks this against a thread-local list
//! of held locks and panics naming both locks; release builds do not pay
//! for the check. The ranks of the executive's locks are written in one
//! table ([`rank`]), the lock order of the crate.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The lock order of the executive: lower ranks are taken first, and
/// two locks of one rank are never held together (two run queues, two
/// guests). Written out in crate::lib's "Lock order".
pub mod rank {
    /// The giant design's one lock, taken first when a thread enters the
    /// executive; the fine locks below are still taken inside it
    /// (uncontended there), so both designs run the same code.
    pub const GIANT: u8 = 10;
    /// A CPU's run queue: held by its thread while it serves a batch.
    pub const RUNQUEUE: u8 = 20;
    /// One guest's state: its chain (each guest has its own instances of
    /// its agents, so the agents' state is the guest's), its counts, its
    /// end.
    pub const GUEST: u8 = 40;
    /// What all guests share: held calls, the executor's timers and
    /// parents, RPC, dispatch, QoS, boosts, the publisher, the log.
    pub const SHARED: u8 = 50;
}

/// Buckets of the hold histogram: bucket `i` counts holds of
/// `2^i ..< 2^(i+1)` ns (bucket 0 also counts 0 ns); the last one all
/// longer holds (over 2^31 ns, 2 s).
pub const HIST_BUCKETS: usize = 32;

/// One acquisition in this many (on average) has its hold timed.
pub const HOLD_SAMPLE_EVERY: u32 = 16;

#[derive(Default)]
struct Counters {
    acquisitions: AtomicU64,
    contended: AtomicU64,
    wait_ns: AtomicU64,
    max_wait_ns: AtomicU64,
    /// of the timed holds only
    hold_ns: AtomicU64,
    max_hold_ns: AtomicU64,
    timed_holds: AtomicU64,
    hold_hist: [AtomicU64; HIST_BUCKETS],
}

/// Adds `v` to a counter that only the lock's holder writes: a load and a
/// store, no locked read-modify-write.
fn bump(c: &AtomicU64, v: u64) {
    c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
}

/// Raises a maximum that only the lock's holder writes.
fn raise(c: &AtomicU64, v: u64) {
    if v > c.load(Relaxed) {
        c.store(v, Relaxed);
    }
}

/// A snapshot of one lock's statistics (`mantle exec status --locks`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockStats {
    pub name: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    /// Total hold: the timed holds' total scaled to every acquisition.
    pub hold_ns: u64,
    /// The longest timed hold.
    pub max_hold_ns: u64,
    /// Holds timed (about one in [`HOLD_SAMPLE_EVERY`]).
    #[serde(default)]
    pub timed_holds: u64,
    /// Timed holds per log2 bucket of ns ([`HIST_BUCKETS`]).
    pub hold_hist: Vec<u64>,
}

impl LockStats {
    /// Adds `other`'s counts (locks of one kind, e.g. every run queue).
    pub fn absorb(&mut self, other: &LockStats) {
        self.acquisitions += other.acquisitions;
        self.contended += other.contended;
        self.wait_ns += other.wait_ns;
        self.max_wait_ns = self.max_wait_ns.max(other.max_wait_ns);
        self.hold_ns += other.hold_ns;
        self.max_hold_ns = self.max_hold_ns.max(other.max_hold_ns);
        self.timed_holds += other.timed_holds;
        if self.hold_hist.len() < other.hold_hist.len() {
            self.hold_hist.resize(other.hold_hist.len(), 0);
        }
        for (a, b) in self.hold_hist.iter_mut().zip(&other.hold_hist) {
            *a += b;
        }
    }
}

fn bucket(ns: u64) -> usize {
    (63 - ns.max(1).leading_zeros() as usize).min(HIST_BUCKETS - 1)
}

/// A mutex with statistics and a rank.
pub struct StatLock<T> {
    name: &'static str,
    rank: u8,
    /// A hold is timed when the thread's draw is below this (of 2^32).
    sample_below: u64,
    counters: Counters,
    inner: Mutex<T>,
}

/// Held: derefs to the data; the hold ends when it drops.
pub struct StatGuard<'a, T> {
    lock: &'a StatLock<T>,
    /// When a timed hold began.
    since: Option<Instant>,
    guard: MutexGuard<'a, T>,
}

thread_local! {
    /// (rank, name, address) of each lock this thread holds, in the order
    /// taken. Debug builds only.
    static HELD: RefCell<Vec<(u8, &'static str, usize)>> = const { RefCell::new(Vec::new()) };
    /// The thread's xorshift state for the hold sampling; seeded from the
    /// thread's address of it (never 0).
    static DRAW: Cell<u64> = const { Cell::new(0) };
}

/// A pseudo-random draw in 0..2^32 (xorshift64*: a few ns, no call).
fn draw() -> u64 {
    DRAW.with(|d| {
        let mut x = d.get();
        if x == 0 {
            x = (d as *const Cell<u64> as u64) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        d.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    })
}

impl<T> StatLock<T> {
    /// A lock whose holds are timed one time in [`HOLD_SAMPLE_EVERY`].
    pub fn new(name: &'static str, rank: u8, value: T) -> Self {
        Self::sampling(name, rank, value, HOLD_SAMPLE_EVERY)
    }

    /// A lock whose holds are timed one time in `every` on average
    /// (1: every hold).
    pub fn sampling(name: &'static str, rank: u8, value: T, every: u32) -> Self {
        StatLock {
            name,
            rank,
            sample_below: (1u64 << 32) / u64::from(every.max(1)),
            counters: Counters::default(),
            inner: Mutex::new(value),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its place in the lock order ([`rank`]).
    pub fn rank(&self) -> u8 {
        self.rank
    }

    /// Takes the lock. A panic of an earlier holder does not make the
    /// data unusable here: the executive's state stays consistent at every
    /// point a panic can leave it (each update is one assignment), and a
    /// poisoned lock would stop every guest for one bad call.
    pub fn lock(&self) -> StatGuard<'_, T> {
        #[cfg(debug_assertions)]
        self.check_order();
        let guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let asked = Instant::now();
                let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                let waited = asked.elapsed().as_nanos() as u64;
                let c = &self.counters;
                bump(&c.contended, 1);
                bump(&c.wait_ns, waited);
                raise(&c.max_wait_ns, waited);
                g
            }
        };
        // held from here: the counters are ours to write
        bump(&self.counters.acquisitions, 1);
        let since = (draw() < self.sample_below).then(Instant::now);
        StatGuard {
            lock: self,
            since,
            guard,
        }
    }

    #[cfg(debug_assertions)]
    fn check_order(&self) {
        let me = self as *const Self as *const () as usize;
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&(r, n, _)) = held.iter().max_by_key(|(r, _, _)| *r) {
                assert!(
                    self.rank > r,
                    "lock order: taking {} (rank {}) while holding {} (rank {})",
                    self.name,
                    self.rank,
                    n,
                    r
                );
            }
            held.push((self.rank, self.name, me));
        });
    }

    /// The statistics so far.
    /// The statistics so far (read without the lock: each counter is
    /// whole, two counters may be one acquisition apart).
    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        let acquisitions = c.acquisitions.load(Relaxed);
        let timed_holds = c.timed_holds.load(Relaxed);
        let timed_ns = c.hold_ns.load(Relaxed);
        let hold_ns = if timed_holds == 0 {
            0
        } else {
            (u128::from(timed_ns) * u128::from(acquisitions.max(timed_holds))
                / u128::from(timed_holds)) as u64
        };
        LockStats {
            name: self.name.to_string(),
            acquisitions,
            contended: c.contended.load(Relaxed),
            wait_ns: c.wait_ns.load(Relaxed),
            max_wait_ns: c.max_wait_ns.load(Relaxed),
            hold_ns,
            max_hold_ns: c.max_hold_ns.load(Relaxed),
            timed_holds,
            hold_hist: c.hold_hist.iter().map(|b| b.load(Relaxed)).collect(),
        }
    }
}

impl<T> Deref for StatGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for StatGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for StatGuard<'_, T> {
    fn drop(&mut self) {
        // still held: the guard field unlocks after this body
        if let Some(since) = self.since {
            let held = since.elapsed().as_nanos() as u64;
            let c = &self.lock.counters;
            bump(&c.hold_ns, held);
            raise(&c.max_hold_ns, held);
            bump(&c.timed_holds, 1);
            bump(&c.hold_hist[bucket(held)], 1);
        }
        #[cfg(debug_assertions)]
        {
            let me = self.lock as *const StatLock<T> as *const () as usize;
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(i) = h.iter().rposition(|&(_, _, a)| a == me) {
                    h.remove(i);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_acquisitions_and_holds() {
        let l = StatLock::sampling("t", rank::GIANT, 0u32, 1);
        for _ in 0..10 {
            *l.lock() += 1;
        }
        let s = l.stats();
        assert_eq!((s.acquisitions, s.contended, *l.lock()), (10, 0, 10));
        assert_eq!((s.hold_hist.iter().sum::<u64>(), s.timed_holds), (10, 10));
    }

    #[test]
    fn holds_are_sampled_but_acquisitions_counted_exactly() {
        let l = StatLock::new("t", rank::GIANT, ());
        for _ in 0..100_000 {
            drop(l.lock());
        }
        let s = l.stats();
        assert_eq!(s.acquisitions, 100_000);
        // expected 100_000 / 16 = 6250, standard deviation about 77
        assert!((5_000..7_500).contains(&s.timed_holds), "{s:?}");
        assert_eq!(s.hold_hist.iter().sum::<u64>(), s.timed_holds);
    }

    #[test]
    fn sampling_is_not_fooled_by_a_lock_taken_in_a_pattern() {
        // Long (>= 2 us) and short holds alternate: a lock timed every
        // k-th time (k even) would see one kind only. Under load a short
        // hold can be preempted into a long one, so the share is given
        // a wide margin around its 1/2.
        let l = StatLock::new("t", rank::GIANT, ());
        for i in 0..40_000 {
            let g = l.lock();
            if i % 2 == 0 {
                let t = Instant::now();
                while t.elapsed().as_nanos() < 2_000 {}
            }
            drop(g);
        }
        let s = l.stats();
        let long: u64 = s.hold_hist[10..].iter().sum();
        let share = long as f64 / s.timed_holds as f64;
        assert!(
            (0.35..0.75).contains(&share),
            "share of long holds {share}: {s:?}"
        );
        // the estimate of the total: at least the long holds' 20_000 x 2 us
        assert!(s.hold_ns >= 30_000_000, "{s:?}");
    }

    #[test]
    fn a_held_lock_makes_the_next_taker_contended_and_counts_its_wait() {
        // Another thread takes the lock, says so, and holds it 100 ms; we
        // ask for it after hearing. We could be descheduled for the whole
        // 100 ms on a loaded machine and find it free: then try again.
        for _ in 0..5 {
            let l = Arc::new(StatLock::sampling("t", rank::GIANT, (), 1));
            let (tx, rx) = std::sync::mpsc::channel();
            let l2 = l.clone();
            let t = std::thread::spawn(move || {
                let _g = l2.lock();
                tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(100));
            });
            rx.recv().unwrap();
            drop(l.lock());
            t.join().unwrap();
            let s = l.stats();
            assert_eq!(s.acquisitions, 2);
            assert!(s.max_hold_ns >= 100_000_000, "held {} ns", s.max_hold_ns);
            if s.contended == 1 {
                assert!(s.max_wait_ns > 0 && s.wait_ns == s.max_wait_ns);
                return;
            }
        }
        panic!("five times the lock was free 100 ms after its holder took it");
    }

    #[test]
    fn taking_in_rank_order_passes() {
        let a = StatLock::new("runqueue", rank::RUNQUEUE, ());
        let b = StatLock::new("guest", rank::GUEST, ());
        let _ga = a.lock();
        let _gb = b.lock();
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(
        expected = "lock order: taking runqueue (rank 20) while holding guest (rank 40)"
    )]
    fn taking_against_rank_order_fires_in_debug_builds() {
        let a = StatLock::new("runqueue", rank::RUNQUEUE, ());
        let b = StatLock::new("guest", rank::GUEST, ());
        let _gb = b.lock();
        let _ga = a.lock();
    }

    #[test]
    fn a_released_lock_no_longer_constrains_the_order() {
        let a = StatLock::new("runqueue", rank::RUNQUEUE, ());
        let b = StatLock::new("guest", rank::GUEST, ());
        drop(b.lock());
        let _ga = a.lock();
        let _gb = b.lock();
    }

    #[test]
    fn buckets_are_log2() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(1023), 9);
        assert_eq!(bucket(1024), 10);
        assert_eq!(bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn absorb_adds_counts_and_keeps_maxima() {
        let mut a = LockStats {
            acquisitions: 1,
            max_hold_ns: 5,
            hold_hist: vec![1, 0],
            ..LockStats::default()
        };
        let b = LockStats {
            acquisitions: 2,
            max_hold_ns: 3,
            hold_hist: vec![0, 2, 1],
            ..LockStats::default()
        };
        a.absorb(&b);
        assert_eq!(
            (a.acquisitions, a.max_hold_ns, a.hold_hist),
            (3, 5, vec![1, 2, 1])
        );
    }
}

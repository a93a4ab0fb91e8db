//! Locks that count: the executive's locks on N CPUs (issue 31), each with
//! statistics that are always on, and, in debug builds, a lock-order check.
//!
//! Statistics, per lock, as `perf lock contention` shows a kernel lock's:
//! acquisitions, contended acquisitions (the lock was held when asked
//! for), total and longest wait, total and longest hold, and a log2
//! histogram of hold times, from which the multicore model
//! (`mantle-lockmodel`) draws its hold times. The cost is two monotonic
//! clock reads per acquisition (18 ns each on this VM, platform.md) and a
//! few relaxed atomic adds on a cache line the holder owns anyway; a
//! contended acquisition reads the clock once more. That is small beside
//! what a lock guards here: an interposed call's round trip of a few µs.
//!
//! Lock order: every lock has a rank; a thread may take a lock only if
//! its rank is greater than the rank of every lock the thread holds. In
//! debug builds each acquisition checks this against a thread-local list
//! of held locks and panics naming both locks; release builds do not pay
//! for the check. The ranks of the executive's locks are written in one
//! table ([`rank`]), the lock order of the crate.

use std::cell::RefCell;
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

#[derive(Default)]
struct Counters {
    acquisitions: AtomicU64,
    contended: AtomicU64,
    wait_ns: AtomicU64,
    max_wait_ns: AtomicU64,
    hold_ns: AtomicU64,
    max_hold_ns: AtomicU64,
    hold_hist: [AtomicU64; HIST_BUCKETS],
}

/// A snapshot of one lock's statistics (`mantle exec status --locks`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockStats {
    pub name: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    pub hold_ns: u64,
    pub max_hold_ns: u64,
    /// Holds per log2 bucket of ns ([`HIST_BUCKETS`]).
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
    counters: Counters,
    inner: Mutex<T>,
}

/// Held: derefs to the data; the hold ends when it drops.
pub struct StatGuard<'a, T> {
    lock: &'a StatLock<T>,
    since: Instant,
    guard: MutexGuard<'a, T>,
}

thread_local! {
    /// (rank, name, address) of each lock this thread holds, in the order
    /// taken. Debug builds only.
    static HELD: RefCell<Vec<(u8, &'static str, usize)>> = const { RefCell::new(Vec::new()) };
}

impl<T> StatLock<T> {
    pub fn new(name: &'static str, rank: u8, value: T) -> Self {
        StatLock {
            name,
            rank,
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
                c.contended.fetch_add(1, Relaxed);
                c.wait_ns.fetch_add(waited, Relaxed);
                c.max_wait_ns.fetch_max(waited, Relaxed);
                g
            }
        };
        self.counters.acquisitions.fetch_add(1, Relaxed);
        StatGuard {
            lock: self,
            since: Instant::now(),
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
    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        LockStats {
            name: self.name.to_string(),
            acquisitions: c.acquisitions.load(Relaxed),
            contended: c.contended.load(Relaxed),
            wait_ns: c.wait_ns.load(Relaxed),
            max_wait_ns: c.max_wait_ns.load(Relaxed),
            hold_ns: c.hold_ns.load(Relaxed),
            max_hold_ns: c.max_hold_ns.load(Relaxed),
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
        let held = self.since.elapsed().as_nanos() as u64;
        let c = &self.lock.counters;
        c.hold_ns.fetch_add(held, Relaxed);
        c.max_hold_ns.fetch_max(held, Relaxed);
        c.hold_hist[bucket(held)].fetch_add(1, Relaxed);
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
        let l = StatLock::new("t", rank::GIANT, 0u32);
        for _ in 0..10 {
            *l.lock() += 1;
        }
        let s = l.stats();
        assert_eq!((s.acquisitions, s.contended, *l.lock()), (10, 0, 10));
        assert_eq!(s.hold_hist.iter().sum::<u64>(), 10);
    }

    #[test]
    fn a_held_lock_makes_the_next_taker_contended_and_counts_its_wait() {
        // Another thread takes the lock, says so, and holds it 100 ms; we
        // ask for it after hearing. We could be descheduled for the whole
        // 100 ms on a loaded machine and find it free: then try again.
        for _ in 0..5 {
            let l = Arc::new(StatLock::new("t", rank::GIANT, ()));
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

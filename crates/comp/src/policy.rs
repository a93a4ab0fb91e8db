//! The interface between the TMEM scheduling policy and the managers
//! (paper §V-A, Table II), as a pure core: at each policy run (every
//! `[policy] period_ms`, the paper's quarter second by default) the
//! manager builds a [`Snapshot`] — per (component, kind) a^j, units in
//! use, units whose *used* bit was set since the last run (the manager
//! clears them), threads blocked now, per-thread block time and count
//! since the last run (from the tables in shared memory), δ^j — and the
//! policy returns [`Decision`]s, Table II's `set_desired(c, amount)`.
//! [`enforce`] then holds the decisions to each cache's bounds and to
//! the partition of the global pool between the managers (the stack
//! manager's `limits.stacks` contexts, the CBUF manager's
//! `limits.cbuf_pages` pages). No system calls here; the policy of a
//! later issue (Algorithm 1) plugs in as another [`Policy`].
//!
//! Units: contexts for [`Kind::Stack`], 4 KiB pages for [`Kind::Cbuf`].

use std::collections::BTreeMap;

/// The TMEM types (the paper's two; "virtual components" are
/// (component, type) pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Stack,
    Cbuf,
}

/// One thread's blocking on one cache: b_i^j and the block count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadBlock {
    pub tid: u32,
    pub blocks: u32,
    pub block_ns: u64,
}

/// One component's view for one TMEM type since the last run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CacheView {
    /// a^j: units in the cache.
    pub allocated: u32,
    /// Units in use now.
    pub in_use: u32,
    /// Units whose used bit was set since the last run.
    pub used_since: u32,
    /// Threads blocked in tmem_get now.
    pub blocked: u32,
    /// Per thread, since the last run (threads that did not block are
    /// absent), sorted by tid.
    pub per_thread: Vec<ThreadBlock>,
    /// δ^j currently set.
    pub desired: u32,
    /// The most this cache may ever hold (the system file's bound).
    pub max: u32,
    /// The least it may hold (P3: its largest single allocation, e.g. the
    /// pages of its largest CBUF slab); 0: the snapshot's `minimum`.
    #[serde(default)]
    pub min: u32,
    /// r^j as [`CacheView::estimated_requests`] computes it (for status).
    pub estimated_requests: u32,
}

impl CacheView {
    /// `get_estimated_requests(c)`: r^j is a^j plus the requests that
    /// found the cache empty: the threads blocked now or, if more, the
    /// threads that blocked since the last run (a sample of `blocked`
    /// alone at the run's instant misses a cache where threads queue
    /// between runs: its r^j read a^j, t_est 0, and nothing moved there
    /// in most runs); otherwise the units actually used since the last
    /// run (used bits), so an idle cache estimates below a^j.
    pub fn estimated_requests(&self) -> u32 {
        let waited = self.per_thread.iter().filter(|b| b.blocks > 0).count() as u32;
        let over = self.blocked.max(waited);
        if over > 0 {
            self.allocated.saturating_add(over)
        } else {
            self.used_since.max(self.in_use)
        }
    }
    fn thread(&self, tid: u32) -> Option<&ThreadBlock> {
        self.per_thread.iter().find(|b| b.tid == tid)
    }
    /// `get_thd_blk_time(c, t)` in ns, since the last run.
    pub fn thd_blk_time(&self, tid: u32) -> u64 {
        self.thread(tid).map_or(0, |b| b.block_ns)
    }
    /// `get_thd_blk_cnt(c, t)`, since the last run.
    pub fn thd_blk_cnt(&self, tid: u32) -> u32 {
        self.thread(tid).map_or(0, |b| b.blocks)
    }
}

/// Per-thread activity since the last run, from two cumulative readings
/// of a block table (both sorted by tid). A counter that went backwards
/// (the table was cleared, a restarted component) counts from zero.
pub fn deltas(prev: &[ThreadBlock], now: &[ThreadBlock]) -> Vec<ThreadBlock> {
    now.iter()
        .filter_map(|n| {
            let p = prev.iter().find(|p| p.tid == n.tid).copied();
            let d = match p {
                Some(p) if p.blocks <= n.blocks && p.block_ns <= n.block_ns => ThreadBlock {
                    tid: n.tid,
                    blocks: n.blocks - p.blocks,
                    block_ns: n.block_ns - p.block_ns,
                },
                _ => *n,
            };
            (d.blocks > 0 || d.block_ns > 0).then_some(d)
        })
        .collect()
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// (component, kind) → view.
    pub caches: BTreeMap<(String, Kind), CacheView>,
    /// The global pool per kind: its partition between the managers.
    pub pool: BTreeMap<Kind, u32>,
    /// The least each cache may hold (P3: one maximal allocation).
    pub minimum: u32,
    /// The real-time threads (T) and their average tardiness since the
    /// last run, from checked reports ([`crate::tmem::TardinessReport`]).
    #[serde(skip)]
    pub tardiness: crate::tmem::Tardiness,
}

/// `set_desired(c, amount)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub component: String,
    pub kind: Kind,
    pub desired: u32,
}

/// A TMEM scheduling policy: data in, decisions out, no system calls.
pub trait Policy: Send + Sync {
    fn name(&self) -> &'static str;
    fn run(&mut self, s: &Snapshot) -> Vec<Decision>;
    /// Whether threads blocked on an empty cache lend their priority to a
    /// holder (the paper's "w/o PI" variants say no).
    fn pi(&self) -> bool {
        true
    }
}

/// A decision [`enforce`] changed: what the policy asked, what it got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Clamped {
    pub component: String,
    pub kind: Kind,
    pub asked: u32,
    pub desired: u32,
}

/// Holds decisions to the rules the managers keep whatever the policy, as
/// one transaction: each cache between `minimum` and its `max`, unknown
/// caches dropped (the last decision for a cache counts), and the sum of
/// δ^j per kind within the pool, the decisions taken together: the
/// caches without a decision keep their δ^j, and when the decided ones
/// do not fit in the rest, each keeps its minimum and the part above it
/// is scaled down in proportion (never below the minimum: P3 holds even
/// when the pool is full). Returns the decisions in the order first
/// given, and those it changed.
pub fn enforce(s: &Snapshot, decisions: Vec<Decision>) -> (Vec<Decision>, Vec<Clamped>) {
    let mut order: Vec<(String, Kind)> = Vec::new();
    let mut asked: BTreeMap<(String, Kind), u32> = BTreeMap::new();
    for d in decisions {
        let key = (d.component, d.kind);
        if !s.caches.contains_key(&key) {
            continue;
        }
        if asked.insert(key.clone(), d.desired).is_none() {
            order.push(key);
        }
    }
    let lo = |v: &CacheView| s.minimum.max(v.min).min(v.max);
    let mut got: BTreeMap<(String, Kind), u32> = asked
        .iter()
        .map(|(k, &n)| {
            let v = &s.caches[k];
            (k.clone(), n.min(v.max).max(lo(v)))
        })
        .collect();
    let kinds: std::collections::BTreeSet<Kind> = got.keys().map(|k| k.1).collect();
    for kind in kinds {
        let pool = s.pool.get(&kind).copied().unwrap_or(0) as u64;
        let kept: u64 = s
            .caches
            .iter()
            .filter(|(k, _)| k.1 == kind && !got.contains_key(*k))
            .map(|(_, v)| v.desired as u64)
            .sum();
        let room = pool.saturating_sub(kept);
        let mine: Vec<(String, Kind)> = got.keys().filter(|k| k.1 == kind).cloned().collect();
        let total: u64 = mine.iter().map(|k| got[k] as u64).sum();
        if total <= room {
            continue;
        }
        let base: u64 = mine.iter().map(|k| lo(&s.caches[k]) as u64).sum();
        let (extra_room, extra) = (room.saturating_sub(base), total - base);
        for k in mine {
            let l = lo(&s.caches[&k]) as u64;
            let n = got[&k] as u64;
            // extra > 0: total > room >= ... and total > base here
            let scaled = l + (n - l) * extra_room / extra.max(1);
            got.insert(k, scaled as u32);
        }
    }
    let mut out = Vec::new();
    let mut clamped = Vec::new();
    for key in order {
        let (n, a) = (got[&key], asked[&key]);
        if n != a {
            clamped.push(Clamped {
                component: key.0.clone(),
                kind: key.1,
                asked: a,
                desired: n,
            });
        }
        out.push(Decision {
            component: key.0,
            kind: key.1,
            desired: n,
        });
    }
    (out, clamped)
}

/// The trivial fixed policy: every cache keeps the amount the system file
/// gives it, clamped to the minimum and to what the pool of its kind
/// allows (shares scaled down when the pool is smaller than their sum).
/// It decides only when a cache's δ^j differs from its amount.
pub struct Fixed {
    pub initial: BTreeMap<(String, Kind), u32>,
}

impl Policy for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        let mut out = Vec::new();
        for (kind, &pool) in &s.pool {
            let mine: Vec<(&(String, Kind), u32)> = self
                .initial
                .iter()
                .filter(|((_, k), _)| k == kind)
                .map(|(c, &n)| (c, n.max(s.minimum)))
                .collect();
            let sum: u64 = mine.iter().map(|(_, n)| *n as u64).sum();
            for ((name, _), n) in mine {
                let d = if sum <= pool as u64 {
                    n
                } else {
                    ((n as u64 * pool as u64 / sum) as u32).max(s.minimum)
                };
                if s.caches.get(&(name.clone(), *kind)).map(|v| v.desired) != Some(d) {
                    out.push(Decision {
                        component: name.clone(),
                        kind: *kind,
                        desired: d,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforce_never_exceeds_the_pool_for_any_shares() {
        // three caches, every split of asks 0..=12 each, pools 0..=20
        for pool in 0..=20u32 {
            let s = snap(Kind::Stack, pool, &[("a", 1, 9), ("b", 1, 9), ("c", 1, 9)]);
            for x in 0..=12 {
                for y in 0..=12 {
                    let (d, _) = enforce(
                        &s,
                        vec![
                            dec("a", Kind::Stack, x),
                            dec("b", Kind::Stack, y),
                            dec("c", Kind::Stack, 12 - x.min(12)),
                        ],
                    );
                    let sum: u32 = d.iter().map(|d| d.desired).sum();
                    assert!(d.iter().all(|d| (1..=9).contains(&d.desired)), "{d:?}");
                    assert!(sum <= pool.max(3), "pool {pool}: {d:?}");
                    let clamped = x.clamp(1, 9) + y.clamp(1, 9) + (12 - x).clamp(1, 9);
                    if clamped <= pool {
                        // it fits: nothing is cut but the bound
                        assert_eq!(d[0].desired, x.clamp(1, 9));
                    }
                }
            }
        }
    }

    fn tb(tid: u32, blocks: u32, block_ns: u64) -> ThreadBlock {
        ThreadBlock {
            tid,
            blocks,
            block_ns,
        }
    }

    #[test]
    fn estimated_requests_follow_blocking_and_used_bits() {
        let mut v = CacheView {
            allocated: 4,
            in_use: 1,
            used_since: 2,
            ..Default::default()
        };
        assert_eq!(v.estimated_requests(), 2);
        v.used_since = 0;
        assert_eq!(v.estimated_requests(), 1, "in use counts when no bit");
        v.blocked = 3;
        assert_eq!(v.estimated_requests(), 7);
        v.allocated = u32::MAX;
        assert_eq!(v.estimated_requests(), u32::MAX);
        // nobody blocked at the run's instant, two threads did since the
        // last run: both are requests beyond a^j
        v.allocated = 2;
        v.blocked = 0;
        v.per_thread = vec![tb(9, 2, 500), tb(11, 1, 70)];
        assert_eq!(v.estimated_requests(), 4);
        v.blocked = 3;
        assert_eq!(v.estimated_requests(), 5, "the larger of the two");
        v.per_thread.clear();
        v.per_thread.push(tb(9, 2, 500));
        assert_eq!(
            (v.thd_blk_time(9), v.thd_blk_cnt(9), v.thd_blk_time(1)),
            (500, 2, 0)
        );
    }

    #[test]
    fn deltas_count_since_the_last_run_and_survive_a_reset() {
        let prev = [tb(1, 3, 300), tb(2, 1, 100), tb(5, 4, 40)];
        let now = [tb(1, 5, 700), tb(2, 1, 100), tb(3, 1, 9), tb(5, 1, 10)];
        assert_eq!(
            deltas(&prev, &now),
            [tb(1, 2, 400), tb(3, 1, 9), tb(5, 1, 10)]
        );
        assert!(deltas(&now, &now).is_empty());
        assert_eq!(deltas(&[], &now), now.to_vec());
    }

    fn snap(kind: Kind, pool: u32, caches: &[(&str, u32, u32)]) -> Snapshot {
        Snapshot {
            pool: [(kind, pool)].into(),
            minimum: 1,
            tardiness: Default::default(),
            caches: caches
                .iter()
                .map(|&(n, desired, max)| {
                    (
                        (n.to_string(), kind),
                        CacheView {
                            desired,
                            max,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    fn dec(c: &str, kind: Kind, desired: u32) -> Decision {
        Decision {
            component: c.into(),
            kind,
            desired,
        }
    }

    #[test]
    fn enforce_keeps_every_decision_within_bounds_and_the_pool() {
        // every requested amount 0..=20 for "a" beside "b" holding 4 of a
        // pool of 10, "a" at most 8
        let s = snap(Kind::Stack, 10, &[("a", 2, 8), ("b", 4, 8)]);
        for want in 0..=20 {
            let (d, c) = enforce(&s, vec![dec("a", Kind::Stack, want)]);
            let got = want.clamp(1, 6);
            assert_eq!(d, [dec("a", Kind::Stack, got)], "want {want}");
            // every change is reported, with what was asked
            assert_eq!(c.len(), (got != want) as usize, "want {want}");
        }
        // decisions are one transaction: taken together, each keeps the
        // minimum and the rest is shared in proportion
        let (d, c) = enforce(&s, vec![dec("a", Kind::Stack, 8), dec("b", Kind::Stack, 8)]);
        assert_eq!(d, [dec("a", Kind::Stack, 5), dec("b", Kind::Stack, 5)]);
        assert_eq!(c.len(), 2);
        // a decrease makes room for an increase in the same run, in any
        // order
        for ds in [
            vec![dec("a", Kind::Stack, 8), dec("b", Kind::Stack, 2)],
            vec![dec("b", Kind::Stack, 2), dec("a", Kind::Stack, 8)],
        ] {
            let (d, c) = enforce(&s, ds);
            assert!(c.is_empty(), "{c:?}");
            assert_eq!(d.iter().map(|d| d.desired).sum::<u32>(), 10);
        }
        // unknown caches and kinds are dropped; the minimum survives a
        // full pool
        let (d, _) = enforce(&s, vec![dec("z", Kind::Stack, 1), dec("a", Kind::Cbuf, 1)]);
        assert!(d.is_empty());
        let full = snap(Kind::Stack, 4, &[("a", 1, 8), ("b", 4, 8)]);
        assert_eq!(
            enforce(&full, vec![dec("a", Kind::Stack, 3)]).0,
            [dec("a", Kind::Stack, 1)]
        );
    }

    #[test]
    fn fixed_policy_keeps_shares_and_scales_to_the_pool() {
        let mut p = Fixed {
            initial: [
                (("a".into(), Kind::Stack), 4),
                (("b".into(), Kind::Stack), 4),
            ]
            .into(),
        };
        let mut s = Snapshot {
            pool: [(Kind::Stack, 8)].into(),
            minimum: 1,
            ..Default::default()
        };
        let d = p.run(&s);
        assert_eq!(d.iter().map(|d| d.desired).collect::<Vec<_>>(), [4, 4]);
        for pool in 0..=8u32 {
            s.pool.insert(Kind::Stack, pool);
            let want = (pool / 2).max(1);
            assert_eq!(
                p.run(&s).iter().map(|d| d.desired).collect::<Vec<_>>(),
                [want, want],
                "pool {pool}"
            );
        }
        for (name, n) in [("a", 4), ("b", 4)] {
            s.caches.insert(
                (name.into(), Kind::Stack),
                CacheView {
                    desired: n,
                    ..Default::default()
                },
            );
        }
        s.pool.insert(Kind::Stack, 8);
        assert!(p.run(&s).is_empty());
    }
}

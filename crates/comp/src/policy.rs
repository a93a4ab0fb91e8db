//! The interface between the TMEM scheduling policy and the managers
//! (paper §V-A, Table II), as a pure core: the managers produce a
//! [`Snapshot`] per policy run, the policy returns [`Decision`]s
//! (`set_desired`). No system calls here; the policy of a later issue
//! (Algorithm 1) plugs in as another [`Policy`].

use std::collections::BTreeMap;

/// The TMEM types (the paper's two; "virtual components" are
/// (component, type) pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Kind {
    Stack,
    Cbuf,
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
    /// Per thread: (block time ns b_i^j, block count).
    pub per_thread: BTreeMap<u32, (u64, u32)>,
    /// δ^j currently set.
    pub desired: u32,
}

impl CacheView {
    /// `get_estimated_requests(c)`: r^j is a^j plus the blocked requests
    /// when threads wait; otherwise the units actually used since the
    /// last run (used bits), so an idle cache estimates below a^j.
    pub fn estimated_requests(&self) -> u32 {
        if self.blocked > 0 {
            self.allocated + self.blocked
        } else {
            self.used_since.max(self.in_use)
        }
    }
    /// `get_thd_blk_time(c, t)`.
    pub fn thd_blk_time(&self, tid: u32) -> u64 {
        self.per_thread.get(&tid).map_or(0, |v| v.0)
    }
    /// `get_thd_blk_cnt(c, t)`.
    pub fn thd_blk_cnt(&self, tid: u32) -> u32 {
        self.per_thread.get(&tid).map_or(0, |v| v.1)
    }
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Snapshot {
    /// (component, kind) → view.
    pub caches: BTreeMap<(String, Kind), CacheView>,
    /// The global pool per kind, partitioned between the managers.
    pub pool: BTreeMap<Kind, u32>,
    /// The least each cache may hold (P3: one maximal allocation).
    pub minimum: u32,
}

/// `set_desired(c, amount)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub component: String,
    pub kind: Kind,
    pub desired: u32,
}

pub trait Policy {
    fn run(&mut self, s: &Snapshot) -> Vec<Decision>;
}

/// The trivial fixed policy: every cache keeps the amount it was given at
/// start, clamped to the minimum and to what the pool of its kind allows
/// (shares scaled down when the pool is smaller than their sum).
pub struct Fixed {
    pub initial: BTreeMap<(String, Kind), u32>,
}

impl Policy for Fixed {
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
    fn estimated_requests_follow_blocking_and_used_bits() {
        let mut v = CacheView {
            allocated: 4,
            in_use: 1,
            used_since: 2,
            ..Default::default()
        };
        assert_eq!(v.estimated_requests(), 2);
        v.blocked = 3;
        assert_eq!(v.estimated_requests(), 7);
        v.per_thread.insert(9, (500, 2));
        assert_eq!(
            (v.thd_blk_time(9), v.thd_blk_cnt(9), v.thd_blk_time(1)),
            (500, 2, 0)
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
        s.pool.insert(Kind::Stack, 4);
        assert_eq!(
            p.run(&s).iter().map(|d| d.desired).collect::<Vec<_>>(),
            [2, 2]
        );
        s.pool.insert(Kind::Stack, 0);
        assert_eq!(
            p.run(&s).iter().map(|d| d.desired).collect::<Vec<_>>(),
            [1, 1]
        );
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

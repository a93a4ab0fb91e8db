//! The TMEM scheduling policies of the paper (seeds/003 §V-B, §VI-B) as a
//! pure core: no system calls, data in ([`Snapshot`] with the real-time
//! threads' tardiness), `set_desired` decisions out. The manager holds
//! the decisions to the bounds and the pools afterwards
//! ([`crate::policy::enforce`]).
//!
//! * [`Tmem`]: Algorithm 1. Per virtual component j (a component × a
//!   TMEM type) it reads r^j, a^j and, per real-time thread i that blocked
//!   there since the last run, b_i^j; per thread the average tardiness
//!   t_i of its jobs completed since the last run. It estimates
//!   `t_est_i^j(Δ) = t_i − Δ·b_i^j/(r^j − a^j)` (0 when r^j ≤ a^j), then
//!   moves one unit at a time — from the free pool of that type, or else
//!   from the component where losing it hurts least — to the component
//!   whose thread would still be the most tardy with one more unit, while
//!   that move lowers the larger of the two estimates; last, δ^j for every
//!   component. A move updates a^j and the tardiness of every thread that
//!   blocked in j (`add_tmem_update_tardiness`): adding a unit takes
//!   b_i^j/(r^j − a^j) off t_i (and off the block time left), removing one
//!   adds it. At most as many moves as units (O(M·|C|·|T|), the paper's
//!   bound).
//! * [`Min`], [`Max`], [`Fair`], [`Greedy`]: the alternatives of §VI-B.
//!   `greedy` and `tmem` also come without priority inheritance
//!   ([`Policy::pi`] false): the runtime then waits on an empty cache
//!   without lending its priority (the paper's "w/o PI" variants).
//!
//! Reading of the paper where it is loose: `find_max_tardiness_component`
//! takes only components that can grow (a^j below its bound, r^j > a^j,
//! a thread with t_i > 0 blocked there); `find_min_tardiness_component`
//! takes only components above their minimum, other than c^max, and of
//! c^max's type; a move happens only if it helps (the donor's estimate
//! after losing a unit stays below c^max's before gaining it, so the
//! larger of the two falls).

use std::collections::BTreeMap;

use crate::policy::{CacheView, Decision, Kind, Policy, Snapshot};

/// The longest average tardiness a report may carry (an hour): more is
/// a broken clock or a lie, not a tardy job.
pub const MAX_TARDINESS_NS: u64 = 3_600_000_000_000;

/// One thread's report of the jobs it completed since the last run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TardinessReport {
    pub tid: u32,
    /// Whether the thread runs a real-time policy (SCHED_FIFO/RR/DEADLINE):
    /// only real-time threads are in T.
    pub realtime: bool,
    /// Jobs completed since the last run.
    pub jobs: u32,
    /// The sum of their tardiness, ns (max(0, completion − deadline)
    /// each; a thread without a period: its response time above its own
    /// average).
    pub total_ns: i64,
}

/// Why a tardiness report was refused at the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("tid 0")]
    NoThread,
    #[error("not a real-time thread")]
    NotRealTime,
    #[error("no job completed")]
    NoJobs,
    #[error("negative tardiness")]
    Negative,
    #[error("tardiness past {} s a job", MAX_TARDINESS_NS / 1_000_000_000)]
    Overflow,
}

impl TardinessReport {
    /// The average tardiness (ns) the report stands for, or why not.
    pub fn average(&self) -> Result<u64, Rejected> {
        if self.tid == 0 {
            return Err(Rejected::NoThread);
        }
        if !self.realtime {
            return Err(Rejected::NotRealTime);
        }
        if self.jobs == 0 {
            return Err(Rejected::NoJobs);
        }
        if self.total_ns < 0 {
            return Err(Rejected::Negative);
        }
        let avg = self.total_ns as u64 / self.jobs as u64;
        if avg > MAX_TARDINESS_NS {
            return Err(Rejected::Overflow);
        }
        Ok(avg)
    }
}

/// Per-thread tardiness as the policy reads it: tid → average ns over the
/// jobs completed since the last run, built from checked reports only.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tardiness(pub BTreeMap<u32, u64>);

impl Tardiness {
    /// Adds a report (several reports of one thread average by jobs).
    pub fn add(
        &mut self,
        r: &TardinessReport,
        jobs_so_far: &mut BTreeMap<u32, u32>,
    ) -> Result<(), Rejected> {
        let avg = r.average()?;
        let n = jobs_so_far.entry(r.tid).or_insert(0);
        let prev = self.0.get(&r.tid).copied().unwrap_or(0);
        let total = prev as u128 * *n as u128 + avg as u128 * r.jobs as u128;
        *n = n.saturating_add(r.jobs);
        self.0.insert(r.tid, (total / (*n).max(1) as u128) as u64);
        Ok(())
    }
}

fn lo(s: &Snapshot, v: &CacheView) -> u32 {
    s.minimum.max(v.min).min(v.max)
}

/// `min`: every cache at its minimum (P3: one largest allocation), so
/// every thread progresses and nothing more is held.
#[derive(Debug, Default)]
pub struct Min;

impl Policy for Min {
    fn name(&self) -> &'static str {
        "min"
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        all(s, |v| lo(s, v))
    }
}

/// `max`: no limit: every cache may hold its bound.
#[derive(Debug, Default)]
pub struct Max;

impl Policy for Max {
    fn name(&self) -> &'static str {
        "max"
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        all(s, |v| v.max)
    }
}

/// `fair`: each type's pool in equal shares (a cache's bound caps its
/// share; the minimum floors it).
#[derive(Debug, Default)]
pub struct Fair;

impl Policy for Fair {
    fn name(&self) -> &'static str {
        "fair"
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        let count = |k: Kind| s.caches.keys().filter(|c| c.1 == k).count().max(1) as u32;
        s.caches
            .iter()
            .map(|((c, k), v)| Decision {
                component: c.clone(),
                kind: *k,
                desired: (s.pool.get(k).copied().unwrap_or(0) / count(*k))
                    .min(v.max)
                    .max(lo(s, v)),
            })
            .collect()
    }
}

fn all(s: &Snapshot, f: impl Fn(&CacheView) -> u32) -> Vec<Decision> {
    s.caches
        .iter()
        .map(|((c, k), v)| Decision {
            component: c.clone(),
            kind: *k,
            desired: f(v),
        })
        .collect()
}

/// `greedy`: memory goes to whoever asks (r^j above δ^j) while the pool
/// of its type has any left, and is never taken back; components are
/// served in the order of their names. `pi` false: the variant without
/// priority inheritance.
#[derive(Debug)]
pub struct Greedy {
    pub pi: bool,
}

impl Policy for Greedy {
    fn name(&self) -> &'static str {
        if self.pi {
            "greedy"
        } else {
            "greedy-nopi"
        }
    }
    fn pi(&self) -> bool {
        self.pi
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        let mut free: BTreeMap<Kind, u64> = s
            .pool
            .iter()
            .map(|(k, &p)| {
                let used: u64 = s
                    .caches
                    .iter()
                    .filter(|(c, _)| c.1 == *k)
                    .map(|(_, v)| v.desired.max(lo(s, v)) as u64)
                    .sum();
                (*k, (p as u64).saturating_sub(used))
            })
            .collect();
        let mut out = Vec::new();
        for ((c, k), v) in &s.caches {
            let have = v.desired.max(lo(s, v));
            let want = v.estimated_requests.min(v.max);
            let left = free.entry(*k).or_insert(0);
            let give = (want.saturating_sub(have) as u64).min(*left) as u32;
            *left -= give as u64;
            if give > 0 || have != v.desired {
                out.push(Decision {
                    component: c.clone(),
                    kind: *k,
                    desired: have + give,
                });
            }
        }
        out
    }
}

/// Algorithm 1 (module doc). `pi` false: the variant without priority
/// inheritance. `moves` counts the units moved in the last run (for
/// status and the cost benchmark).
#[derive(Debug)]
pub struct Tmem {
    pub pi: bool,
    pub moves: u64,
}

impl Tmem {
    pub fn new(pi: bool) -> Tmem {
        Tmem { pi, moves: 0 }
    }
}

/// One virtual component's state during a run.
struct Vc {
    key: (String, Kind),
    a: u32,
    r: u32,
    lo: u32,
    hi: u32,
    /// Real-time threads that blocked here: (index into t, b_i^j ns left).
    blocked: Vec<(usize, f64)>,
}

impl Vc {
    /// b/(r − a) for one thread's block time `b`: the tardiness one unit
    /// removes (0 when r ≤ a).
    fn per_unit(&self, b: f64) -> f64 {
        if self.r > self.a {
            b / (self.r - self.a) as f64
        } else {
            0.0
        }
    }
    /// Units held above what was requested since the last run.
    fn idle(&self) -> u32 {
        self.a.saturating_sub(self.r)
    }
    /// max over the threads blocked here of t_est(Δ).
    fn est(&self, t: &[f64], delta: f64) -> f64 {
        self.blocked
            .iter()
            .map(|&(i, b)| {
                if self.r > self.a {
                    (t[i] - delta * self.per_unit(b)).max(0.0)
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }
    /// add_tmem_update_tardiness (`sign` 1) / remove_ (`sign` −1).
    fn change(&mut self, t: &mut [f64], sign: i32) {
        for k in 0..self.blocked.len() {
            let (i, b) = self.blocked[k];
            let d = self.per_unit(b);
            if sign > 0 {
                t[i] = (t[i] - d).max(0.0);
                self.blocked[k].1 = (b - d).max(0.0);
            } else {
                t[i] += d;
                self.blocked[k].1 = b + d;
            }
        }
        self.a = if sign > 0 { self.a + 1 } else { self.a - 1 };
    }
}

impl Policy for Tmem {
    fn name(&self) -> &'static str {
        if self.pi {
            "tmem"
        } else {
            "tmem-nopi"
        }
    }
    fn pi(&self) -> bool {
        self.pi
    }
    fn run(&mut self, s: &Snapshot) -> Vec<Decision> {
        // T: the threads with a checked tardiness report
        let tids: Vec<u32> = s.tardiness.0.keys().copied().collect();
        let mut t: Vec<f64> = s.tardiness.0.values().map(|&n| n as f64).collect();
        let mut vcs: Vec<Vc> = s
            .caches
            .iter()
            .map(|(key, v)| {
                let lo = lo(s, v);
                Vc {
                    key: key.clone(),
                    // the policy's working a^j is what the cache may hold
                    // now (δ^j), never under the minimum
                    a: v.desired.clamp(lo, v.max.max(lo)),
                    r: v.estimated_requests,
                    lo,
                    hi: v.max.max(lo),
                    blocked: v
                        .per_thread
                        .iter()
                        .filter_map(|b| {
                            let i = tids.binary_search(&b.tid).ok()?;
                            (b.block_ns > 0).then_some((i, b.block_ns as f64))
                        })
                        .collect(),
                }
            })
            .collect();
        let mut free: BTreeMap<Kind, i64> = s
            .pool
            .iter()
            .map(|(k, &p)| {
                let held: i64 = vcs
                    .iter()
                    .filter(|v| v.key.1 == *k)
                    .map(|v| v.a as i64)
                    .sum();
                (*k, p as i64 - held)
            })
            .collect();
        let budget: u64 = s.pool.values().map(|&p| p as u64).sum();
        self.moves = 0;
        while self.moves < budget {
            // find_max_tardiness_component
            let cmax = (0..vcs.len())
                .filter(|&j| {
                    let v = &vcs[j];
                    v.a < v.hi && v.r > v.a && v.est(&t, 0.0) > 0.0
                })
                .max_by(|&x, &y| vcs[x].est(&t, 1.0).total_cmp(&vcs[y].est(&t, 1.0)));
            let Some(cmax) = cmax else { break };
            let kind = vcs[cmax].key.1;
            if free.get(&kind).copied().unwrap_or(0) > 0 {
                *free.entry(kind).or_insert(0) -= 1;
                vcs[cmax].change(&mut t, 1);
                self.moves += 1;
                continue;
            }
            // find_min_tardiness_component: the donor losing least; the
            // move must lower the larger of the two estimates (c^max's
            // now is the larger: it was chosen as the most tardy)
            let now = vcs[cmax].est(&t, 0.0);
            // Ties (typically every donor at 0: no real-time thread blocked
            // there) go to the donor with the most units its requests did
            // not need (a^j − r^j: idle since the last run): losing one of
            // those delays nobody, where a cache whose every unit was used
            // makes its next caller block. Before, the tie went to the
            // first donor by name, idle or not.
            let cmin = (0..vcs.len())
                .filter(|&j| j != cmax && vcs[j].key.1 == kind && vcs[j].a > vcs[j].lo)
                .min_by(|&x, &y| {
                    vcs[x]
                        .est(&t, -1.0)
                        .total_cmp(&vcs[y].est(&t, -1.0))
                        .then(vcs[y].idle().cmp(&vcs[x].idle()))
                });
            match cmin {
                Some(cmin) if vcs[cmin].est(&t, -1.0) < now => {
                    vcs[cmin].change(&mut t, -1);
                    vcs[cmax].change(&mut t, 1);
                    self.moves += 1;
                }
                _ => break,
            }
        }
        vcs.into_iter()
            .map(|v| Decision {
                component: v.key.0,
                kind: v.key.1,
                desired: v.a,
            })
            .collect()
    }
}

/// The policy of a name (`mantle comp policy NAME`, `[policy] name`);
/// None for an unknown name. `fixed` needs the system file and is made
/// by the manager.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    Some(match name {
        "min" => Box::new(Min),
        "max" => Box::new(Max),
        "fair" => Box::new(Fair),
        "greedy" => Box::new(Greedy { pi: true }),
        "greedy-nopi" => Box::new(Greedy { pi: false }),
        "tmem" => Box::new(Tmem::new(true)),
        "tmem-nopi" => Box::new(Tmem::new(false)),
        _ => return None,
    })
}

/// Every name [`by_name`] knows, and `fixed` and `none`.
pub const NAMES: &[&str] = &[
    "none",
    "fixed",
    "min",
    "max",
    "fair",
    "greedy",
    "greedy-nopi",
    "tmem",
    "tmem-nopi",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{enforce, ThreadBlock};

    /// (name, kind, δ^j, max, r^j, [(tid, block ns)])
    type C<'a> = (&'a str, Kind, u32, u32, u32, &'a [(u32, u64)]);

    fn snap(pool: &[(Kind, u32)], caches: &[C], tardy: &[(u32, u64)]) -> Snapshot {
        Snapshot {
            pool: pool.iter().copied().collect(),
            minimum: 1,
            tardiness: Tardiness(tardy.iter().copied().collect()),
            caches: caches
                .iter()
                .map(|&(n, k, desired, max, r, bl)| {
                    (
                        (n.to_string(), k),
                        CacheView {
                            allocated: desired,
                            desired,
                            max,
                            estimated_requests: r,
                            per_thread: bl
                                .iter()
                                .map(|&(tid, block_ns)| ThreadBlock {
                                    tid,
                                    blocks: 1,
                                    block_ns,
                                })
                                .collect(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    fn got(d: &[Decision], name: &str, k: Kind) -> u32 {
        d.iter()
            .find(|d| d.component == name && d.kind == k)
            .map_or(u32::MAX, |d| d.desired)
    }

    const S: Kind = Kind::Stack;
    const B: Kind = Kind::Cbuf;

    #[test]
    fn a_tardy_component_gets_free_units_up_to_its_requests_and_no_more() {
        // a: 2 held, 5 requested, thread 7 blocked 30 ms and 30 ms tardy
        let s = snap(
            &[(S, 20)],
            &[
                ("a", S, 2, 16, 5, &[(7, 30_000_000)]),
                ("b", S, 2, 16, 2, &[]),
            ],
            &[(7, 30_000_000)],
        );
        let mut p = Tmem::new(true);
        let d = p.run(&s);
        // each unit takes b/(r-a) = 10 ms: three units remove it all
        assert_eq!((got(&d, "a", S), got(&d, "b", S)), (5, 2));
        assert_eq!(p.moves, 3);
    }

    #[test]
    fn when_r_is_at_most_a_nothing_is_added() {
        // blocked and tardy, but r^j <= a^j: t_est = 0, no benefit
        for r in [0, 1, 4] {
            let s = snap(
                &[(S, 20)],
                &[("a", S, 4, 16, r, &[(7, 9_000_000)])],
                &[(7, 9_000_000)],
            );
            let d = Tmem::new(true).run(&s);
            assert_eq!(got(&d, "a", S), 4, "r {r}");
        }
    }

    #[test]
    fn with_an_empty_pool_units_move_from_the_least_hurt_component() {
        // pool of 8 all held: a tardy (r 6 > a 3); b idle (r 1 < a 3);
        // c needs all it has (r = a = 2, at its minimum... not: min 1)
        let s = snap(
            &[(S, 8)],
            &[
                ("a", S, 3, 16, 6, &[(7, 30_000_000)]),
                ("b", S, 3, 16, 1, &[]),
                ("c", S, 2, 16, 2, &[]),
            ],
            &[(7, 30_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!(got(&d, "a", S), 6, "{d:?}");
        assert_eq!(d.iter().map(|d| d.desired).sum::<u32>(), 8, "{d:?}");
        // donors give down to their minimum, never below
        assert!(d.iter().all(|d| d.desired >= 1));
    }

    #[test]
    fn among_donors_that_hurt_nobody_an_idle_unit_goes_first() {
        // pool full; a tardy (one unit helps). "b" (first by name) used
        // all 3 of its units (r = a), "c" used 1 of its 3: c gives
        let s = snap(
            &[(S, 8)],
            &[
                ("a", S, 2, 16, 3, &[(7, 30_000_000)]),
                ("b", S, 3, 16, 3, &[]),
                ("c", S, 3, 16, 1, &[]),
            ],
            &[(7, 30_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!(
            (got(&d, "a", S), got(&d, "b", S), got(&d, "c", S)),
            (3, 3, 2),
            "{d:?}"
        );
        // with two units wanted, c gives both of its idle ones before b
        // gives a used one
        let s = snap(
            &[(S, 8)],
            &[
                ("a", S, 2, 16, 4, &[(7, 30_000_000)]),
                ("b", S, 3, 16, 3, &[]),
                ("c", S, 3, 16, 1, &[]),
            ],
            &[(7, 30_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!(
            (got(&d, "a", S), got(&d, "b", S), got(&d, "c", S)),
            (4, 3, 1),
            "{d:?}"
        );
    }

    #[test]
    fn a_component_at_its_minimum_gives_nothing() {
        let mut s = snap(
            &[(S, 4)],
            &[
                ("a", S, 3, 16, 9, &[(7, 50_000_000)]),
                ("b", S, 1, 16, 0, &[]),
            ],
            &[(7, 50_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", S), got(&d, "b", S)), (3, 1));
        // a CBUF cache's minimum is its largest allocation (P3)
        s = snap(
            &[(B, 40)],
            &[
                ("a", B, 24, 64, 40, &[(7, 50_000_000)]),
                ("b", B, 16, 64, 0, &[]),
            ],
            &[(7, 50_000_000)],
        );
        s.caches.get_mut(&("b".into(), B)).unwrap().min = 16;
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", B), got(&d, "b", B)), (24, 16));
        s.caches.get_mut(&("b".into(), B)).unwrap().min = 10;
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", B), got(&d, "b", B)), (30, 10));
    }

    #[test]
    fn the_unit_goes_where_it_helps_most_and_moves_stop_when_none_helps() {
        // one free unit; a's thread is 40 ms tardy, c's 10 ms
        let s = snap(
            &[(S, 5)],
            &[
                ("a", S, 2, 16, 4, &[(1, 40_000_000)]),
                ("c", S, 2, 16, 4, &[(2, 10_000_000)]),
            ],
            &[(1, 40_000_000), (2, 10_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", S), got(&d, "c", S)), (3, 2), "{d:?}");
        // a donor that would become the most tardy is not taken from:
        // both equally tardy, pool full: nothing moves
        let s = snap(
            &[(S, 4)],
            &[
                ("a", S, 2, 16, 4, &[(1, 20_000_000)]),
                ("c", S, 2, 16, 4, &[(2, 20_000_000)]),
            ],
            &[(1, 20_000_000), (2, 20_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", S), got(&d, "c", S)), (2, 2), "{d:?}");
    }

    #[test]
    fn threads_without_a_tardiness_report_are_not_in_t() {
        // a best-effort thread (no report) blocks a lot: no move for it
        let s = snap(&[(S, 20)], &[("a", S, 2, 16, 9, &[(99, 500_000_000)])], &[]);
        let d = Tmem::new(true).run(&s);
        assert_eq!(got(&d, "a", S), 2);
        // types are separate pools: a free stack never becomes a page
        let s = snap(
            &[(S, 20), (B, 4)],
            &[
                ("a", B, 4, 64, 9, &[(7, 50_000_000)]),
                ("b", S, 2, 16, 1, &[]),
            ],
            &[(7, 50_000_000)],
        );
        let d = Tmem::new(true).run(&s);
        assert_eq!((got(&d, "a", B), got(&d, "b", S)), (4, 2));
    }

    #[test]
    fn tmem_keeps_bounds_pool_and_move_budget_on_arbitrary_inputs() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        for _ in 0..2000 {
            let n = 1 + rnd(6) as usize;
            let pool = rnd(40) as u32;
            let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
            let tids: Vec<(u32, u64)> = (1..=4).map(|t| (t, rnd(50_000_000))).collect();
            let mut s = snap(&[(S, pool)], &[], &tids);
            for name in &names {
                let max = 1 + rnd(12) as u32;
                let mut per = Vec::new();
                for tid in 1..=5 {
                    if rnd(2) == 0 {
                        per.push(ThreadBlock {
                            tid,
                            blocks: 1,
                            block_ns: rnd(30_000_000),
                        });
                    }
                }
                s.caches.insert(
                    (name.clone(), S),
                    CacheView {
                        desired: 1 + rnd(max as u64) as u32,
                        max,
                        estimated_requests: rnd(16) as u32,
                        per_thread: per,
                        ..Default::default()
                    },
                );
            }
            let mut p = Tmem::new(true);
            let d = p.run(&s);
            let before: u32 = s.caches.values().map(|v| v.desired).sum();
            let after: u32 = d.iter().map(|d| d.desired).sum();
            assert!(p.moves <= pool as u64);
            // moving never grows the total past the pool (nor past what
            // was held, when that was already over it)
            assert!(after <= pool.max(before), "{s:?} {d:?}");
            for dec in &d {
                let v = &s.caches[&(dec.component.clone(), S)];
                assert!(dec.desired >= 1 && dec.desired <= v.max, "{dec:?} {v:?}");
                // r^j <= a^j: such a cache never grows
                if v.estimated_requests <= v.desired {
                    assert!(dec.desired <= v.desired, "{dec:?} {v:?}");
                }
            }
        }
    }

    #[test]
    fn nonsense_tardiness_reports_are_rejected_at_the_boundary() {
        let ok = TardinessReport {
            tid: 5,
            realtime: true,
            jobs: 4,
            total_ns: 8_000,
        };
        assert_eq!(ok.average(), Ok(2_000));
        for (bad, why) in [
            (TardinessReport { total_ns: -1, ..ok }, Rejected::Negative),
            (
                TardinessReport {
                    total_ns: i64::MIN,
                    ..ok
                },
                Rejected::Negative,
            ),
            (
                TardinessReport {
                    jobs: 1,
                    total_ns: i64::MAX,
                    ..ok
                },
                Rejected::Overflow,
            ),
            (
                TardinessReport {
                    realtime: false,
                    ..ok
                },
                Rejected::NotRealTime,
            ),
            (TardinessReport { jobs: 0, ..ok }, Rejected::NoJobs),
            (TardinessReport { tid: 0, ..ok }, Rejected::NoThread),
        ] {
            assert_eq!(bad.average(), Err(why), "{bad:?}");
            let mut t = Tardiness::default();
            assert_eq!(t.add(&bad, &mut BTreeMap::new()), Err(why));
            assert!(t.0.is_empty(), "a rejected report left a value");
        }
        // two reports of one thread average over their jobs
        let mut t = Tardiness::default();
        let mut n = BTreeMap::new();
        t.add(&ok, &mut n).unwrap();
        t.add(
            &TardinessReport {
                jobs: 1,
                total_ns: 12_000,
                ..ok
            },
            &mut n,
        )
        .unwrap();
        assert_eq!(t.0[&5], 4_000);
    }

    #[test]
    fn min_max_fair_and_greedy_do_what_their_names_say() {
        let mut s = snap(
            &[(S, 12), (B, 100)],
            &[
                ("a", S, 2, 8, 6, &[]),
                ("b", S, 2, 8, 1, &[]),
                ("c", S, 2, 3, 9, &[]),
                ("a", B, 10, 64, 40, &[]),
            ],
            &[],
        );
        s.caches.get_mut(&("a".into(), B)).unwrap().min = 16;
        let d = Min.run(&s);
        assert_eq!(
            (got(&d, "a", S), got(&d, "c", S), got(&d, "a", B)),
            (1, 1, 16)
        );
        let d = Max.run(&s);
        assert_eq!(
            (got(&d, "a", S), got(&d, "c", S), got(&d, "a", B)),
            (8, 3, 64)
        );
        let d = Fair.run(&s);
        // 12 / 3 = 4 each, c capped at its bound
        assert_eq!(
            (got(&d, "a", S), got(&d, "b", S), got(&d, "c", S)),
            (4, 4, 3)
        );
        assert_eq!(got(&d, "a", B), 64);
        // greedy: 6 free stacks; a asks 4 more, c 1 more (its bound 3);
        // b asked nothing and keeps what it has
        let d = Greedy { pi: true }.run(&s);
        assert_eq!(
            (got(&d, "a", S), got(&d, "b", S), got(&d, "c", S)),
            (6, u32::MAX, 3)
        );
        // until it runs out: a pool of 7 leaves a only one more
        s.pool.insert(S, 7);
        let d = Greedy { pi: true }.run(&s);
        assert_eq!((got(&d, "a", S), got(&d, "c", S)), (3, u32::MAX));
        assert_eq!(Greedy { pi: false }.name(), "greedy-nopi");
        assert!(!Tmem::new(false).pi() && Tmem::new(true).pi());
    }

    #[test]
    fn asking_past_the_pool_is_clamped_and_reported() {
        // max over a pool of 6 for bounds 8+8+3
        let s = snap(
            &[(S, 6)],
            &[
                ("a", S, 2, 8, 0, &[]),
                ("b", S, 2, 8, 0, &[]),
                ("c", S, 2, 3, 0, &[]),
            ],
            &[],
        );
        let (d, clamped) = enforce(&s, Max.run(&s));
        assert!(d.iter().map(|d| d.desired).sum::<u32>() <= 6, "{d:?}");
        assert_eq!(clamped.len(), 3, "{clamped:?}");
        assert!(clamped.iter().all(|c| c.asked > c.desired));
    }

    #[test]
    fn every_name_makes_its_policy() {
        for &n in NAMES {
            match by_name(n) {
                Some(p) => assert_eq!(p.name(), n),
                None => assert!(n == "none" || n == "fixed", "{n}"),
            }
        }
        assert!(by_name("magic").is_none());
    }
}

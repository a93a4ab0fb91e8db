//! The simulation: one event queue, FIFO spin locks, time conserved.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};

/// The most events one run may take: a bound on a caller's mistake (a
/// million CPUs, a billion calls), not on any real sweep, which stays
/// under a few million.
const MAX_EVENTS: u64 = 200_000_000;

/// What a model run refuses, and why.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("cpus must be 1 to 4096, not {0}")]
    Cpus(usize),
    #[error("guests per CPU must be at least 1")]
    Guests,
    #[error("calls per guest must be at least 1")]
    Calls,
    #[error("a call needs at least one segment")]
    EmptyCall,
    #[error("{0}: an empirical distribution needs at least one sample")]
    NoSamples(&'static str),
    #[error("{0}: an exponential mean must be finite and positive, not {1}")]
    BadMean(&'static str, f64),
    #[error("the run would take {0} events, more than {MAX_EVENTS}")]
    TooLarge(u64),
    #[error("no handoff in 0..={hi} ns gives a 2-CPU speedup of {target}")]
    NoFit { target: f64, hi: u64 },
}

/// A distribution of durations in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Dist {
    /// Always `ns`.
    Const { ns: u64 },
    /// Exponential with this mean.
    Exp { mean_ns: f64 },
    /// Drawn uniformly from measured samples.
    Empirical { samples_ns: Vec<u64> },
}

impl Dist {
    fn check(&self, what: &'static str) -> Result<(), ModelError> {
        match self {
            Dist::Const { .. } => Ok(()),
            Dist::Exp { mean_ns } if mean_ns.is_finite() && *mean_ns > 0.0 => Ok(()),
            Dist::Exp { mean_ns } => Err(ModelError::BadMean(what, *mean_ns)),
            Dist::Empirical { samples_ns } if samples_ns.is_empty() => {
                Err(ModelError::NoSamples(what))
            }
            Dist::Empirical { .. } => Ok(()),
        }
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        match self {
            Dist::Const { ns } => *ns,
            Dist::Exp { mean_ns } => {
                // 1 - u is in (0, 1], so the logarithm is finite.
                let u = rng.unit();
                (-mean_ns * (1.0 - u).ln()).round() as u64
            }
            Dist::Empirical { samples_ns } => {
                samples_ns[(rng.next() % samples_ns.len() as u64) as usize]
            }
        }
    }

    /// The distribution's mean, in ns.
    pub fn mean(&self) -> f64 {
        match self {
            Dist::Const { ns } => *ns as f64,
            Dist::Exp { mean_ns } => *mean_ns,
            Dist::Empirical { samples_ns } => {
                samples_ns.iter().map(|&s| s as f64).sum::<f64>() / samples_ns.len().max(1) as f64
            }
        }
    }
}

/// Which lock a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockRef {
    /// The one lock of the giant design.
    Giant,
    /// The run-queue lock of the CPU the guest runs on.
    CpuLocal,
    /// One shared lock of the fine design (guest table, an agent's state).
    Shared(u16),
}

/// One stretch of a call's time in the executive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// The lock held for the stretch; `None`: outside any lock.
    pub lock: Option<LockRef>,
    pub time: Dist,
}

/// What one interposed call does in the executive, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub segments: Vec<Segment>,
}

/// One experiment: N CPUs, their guests, and the calls they make.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub cpus: usize,
    pub guests_per_cpu: usize,
    pub calls_per_guest: u64,
    /// User work between two calls (the sweep's K).
    pub user: Dist,
    pub call: Call,
    /// Added to a hold when the lock last belonged to another CPU.
    pub handoff_ns: u64,
    pub seed: u64,
}

/// One lock's statistics, shaped like the executive's own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LockStats {
    pub name: String,
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: u64,
    pub hold_ns: u64,
}

/// What a run gives. Times are sums over CPUs, except `makespan_ns`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub cpus: usize,
    /// When the last CPU finished.
    pub makespan_ns: u64,
    /// When each CPU finished.
    pub finish_ns: Vec<u64>,
    pub user_ns: u64,
    /// In the executive, holding a lock or outside any.
    pub exec_ns: u64,
    /// Spinning for a lock.
    pub wait_ns: u64,
    pub locks: Vec<LockStats>,
}

impl Outcome {
    fn busy(&self) -> f64 {
        (self.user_ns + self.exec_ns + self.wait_ns).max(1) as f64
    }
    /// Share of the CPUs' busy time in guest code.
    pub fn user_share(&self) -> f64 {
        self.user_ns as f64 / self.busy()
    }
    /// Share in the executive, lock waits excluded.
    pub fn exec_share(&self) -> f64 {
        self.exec_ns as f64 / self.busy()
    }
    /// Share spinning for a lock.
    pub fn wait_share(&self) -> f64 {
        self.wait_ns as f64 / self.busy()
    }
    /// The contention: the share of executive time spent waiting.
    pub fn contention(&self) -> f64 {
        self.wait_ns as f64 / (self.exec_ns + self.wait_ns).max(1) as f64
    }
}

/// splitmix64: small, seeded, good enough to draw durations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Where a CPU is in its loop.
#[derive(Clone, Copy)]
enum Phase {
    User,
    Segment(usize),
}

struct Lock {
    free_at: u64,
    last: Option<usize>,
    stats: LockStats,
}

fn check(w: &Workload) -> Result<(), ModelError> {
    if w.cpus == 0 || w.cpus > 4096 {
        return Err(ModelError::Cpus(w.cpus));
    }
    if w.guests_per_cpu == 0 {
        return Err(ModelError::Guests);
    }
    if w.calls_per_guest == 0 {
        return Err(ModelError::Calls);
    }
    if w.call.segments.is_empty() {
        return Err(ModelError::EmptyCall);
    }
    w.user.check("user work")?;
    for s in &w.call.segments {
        s.time.check("segment")?;
    }
    let events = (w.cpus as u64)
        .saturating_mul(w.guests_per_cpu as u64)
        .saturating_mul(w.calls_per_guest)
        .saturating_mul(w.call.segments.len() as u64 + 1);
    if events > MAX_EVENTS {
        return Err(ModelError::TooLarge(events));
    }
    Ok(())
}

/// Runs one experiment.
pub fn simulate(w: &Workload) -> Result<Outcome, ModelError> {
    check(w)?;
    // One stream per CPU: a CPU's draws do not depend on how the CPUs'
    // events interleave, so two runs that differ only in a lock's
    // behaviour (a handoff, the design of a lock) see the same work.
    let mut rng: Vec<Rng> = (0..w.cpus)
        .map(|c| {
            let mut r = Rng(w.seed ^ (c as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
            r.next();
            r
        })
        .collect();
    // Lock table: the giant lock, one per CPU, then shared ones by id.
    let mut names: Vec<String> = vec!["giant".into()];
    names.extend((0..w.cpus).map(|c| format!("runqueue/{c}")));
    let mut shared_ids: Vec<u16> = w
        .call
        .segments
        .iter()
        .filter_map(|s| match s.lock {
            Some(LockRef::Shared(id)) => Some(id),
            _ => None,
        })
        .collect();
    shared_ids.sort_unstable();
    shared_ids.dedup();
    names.extend(shared_ids.iter().map(|id| format!("shared/{id}")));
    let mut locks: Vec<Lock> = names
        .into_iter()
        .map(|name| Lock {
            free_at: 0,
            last: None,
            stats: LockStats {
                name,
                ..LockStats::default()
            },
        })
        .collect();
    let index = |l: LockRef, cpu: usize| -> usize {
        match l {
            LockRef::Giant => 0,
            LockRef::CpuLocal => 1 + cpu,
            LockRef::Shared(id) => 1 + w.cpus + shared_ids.binary_search(&id).unwrap_or(0),
        }
    };

    let iterations = w.guests_per_cpu as u64 * w.calls_per_guest;
    let mut left = vec![iterations; w.cpus];
    let mut phase = vec![Phase::User; w.cpus];
    let (mut user, mut exec, mut wait) =
        (vec![0u64; w.cpus], vec![0u64; w.cpus], vec![0u64; w.cpus]);
    let mut finish = vec![0u64; w.cpus];
    let mut queue: BinaryHeap<Reverse<(u64, usize)>> =
        (0..w.cpus).map(|c| Reverse((0, c))).collect();

    while let Some(Reverse((t, c))) = queue.pop() {
        let next = match phase[c] {
            Phase::User => {
                let d = w.user.sample(&mut rng[c]);
                user[c] += d;
                phase[c] = Phase::Segment(0);
                t + d
            }
            Phase::Segment(i) => {
                let seg = &w.call.segments[i];
                let mut d = seg.time.sample(&mut rng[c]);
                let end = match seg.lock {
                    None => {
                        exec[c] += d;
                        t + d
                    }
                    Some(l) => {
                        let lock = &mut locks[index(l, c)];
                        if lock.last.is_some_and(|p| p != c) {
                            d += w.handoff_ns;
                        }
                        let grant = t.max(lock.free_at);
                        lock.free_at = grant + d;
                        lock.last = Some(c);
                        lock.stats.acquisitions += 1;
                        lock.stats.contended += u64::from(grant > t);
                        lock.stats.wait_ns += grant - t;
                        lock.stats.hold_ns += d;
                        wait[c] += grant - t;
                        exec[c] += d;
                        grant + d
                    }
                };
                if i + 1 < w.call.segments.len() {
                    phase[c] = Phase::Segment(i + 1);
                } else {
                    left[c] -= 1;
                    phase[c] = Phase::User;
                }
                end
            }
        };
        if left[c] == 0 {
            finish[c] = next;
        } else {
            queue.push(Reverse((next, c)));
        }
    }

    for c in 0..w.cpus {
        debug_assert_eq!(
            user[c] + exec[c] + wait[c],
            finish[c],
            "time lost on CPU {c}"
        );
    }
    Ok(Outcome {
        cpus: w.cpus,
        makespan_ns: finish.iter().copied().max().unwrap_or(0),
        finish_ns: finish,
        user_ns: user.iter().sum(),
        exec_ns: exec.iter().sum(),
        wait_ns: wait.iter().sum(),
        locks: locks
            .into_iter()
            .map(|l| l.stats)
            .filter(|s| s.acquisitions > 0)
            .collect(),
    })
}

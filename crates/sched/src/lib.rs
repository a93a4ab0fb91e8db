//! mantle-sched: the executive's scheduling policies, pure cores (issue
//! 11), in a crate of their own (issue 34), so that their purity shows in
//! the dependencies: no mantle crate (not mantle-sys, which makes every
//! system call), and libc for errno values only.
//! The executive (crates/exec, `mantle_exec::sched` re-exports this crate)
//! drives them. No locks: every type is owned by its caller.
//!
//! Hijack's guests "execute only when scheduled by the executive"
//! (seeds/001, section 2.1): the executive is the highest-priority thread,
//! receives timer and kernel events with bounded latency (section 2.3) and
//! runs its own policies over the guests, composed hierarchically "as is
//! the case with the work on Hierarchical Loadable Schedulers (HLS)"
//! (section 2.1). This crate holds those policies as pure decision
//! functions: no system calls, no threads, no clocks. Time is a `u64` of
//! nanoseconds that the caller passes in (any monotonic clock; only
//! differences matter). The mechanism (dispatching real guest threads,
//! timers, interposing `nanosleep` and `sched_*`) lives elsewhere in the
//! executive and drives these types.
//!
//! # The interface
//!
//! * [`TaskId`]: a guest thread as the executive knows it.
//! * [`Params`]: what a task asks for (round robin quantum, fixed
//!   priority, EDF reservation, best effort with a nice value), validated
//!   by [`Params::check`] into a typed [`ParamError`].
//! * [`Policy`]: events and one decision.
//!   - `add(task, params, now)` admits a task (runnable from `now`), or
//!     refuses with an [`AdmitError`] saying why (wrong kind of params for
//!     this policy, invalid params, EDF over its utilisation bound).
//!   - `remove`, `wake` (runnable again: released from a held call, woken
//!     from a sleep), `block` (blocked in an interposed call or in the
//!     kernel), `yield_now` (the guest called `sched_yield`).
//!   - `charge(task, ran_ns, now)`: the dispatched task ran `ran_ns`,
//!     ending at `now` (quantum and budget accounting). Call it before the
//!     next `pick`, for every stretch a task ran.
//!   - `pick(now) -> Dispatch { task, until }`: which task runs now, and
//!     the instant at which the executive must call `pick` again even if
//!     no event arrives (quantum end, budget exhaustion, a period release
//!     that may preempt, a deadline). `task: None` means idle until
//!     `until`; `until: None` means no timer is needed (only an event can
//!     change the decision).
//!   - `take_misses()`: EDF deadline misses since the last call.
//! * Policies: [`rr::RoundRobin`], [`fixed::FixedPriority`], [`edf::Edf`],
//!   and [`hier::Hier`] which composes two of them (the bottom one runs
//!   only in the top one's idle time); [`Standard`] is the usual stack,
//!   EDF over fixed priority over round robin.
//! * [`tokens::Tokens`]: the QoS token scheduler of the paper's Figure 7
//!   (section 3.3), its own type because it decides on "has data" rather
//!   than on runnable/blocked.
//! * [`guest`]: a guest's own `sched_setscheduler`, `sched_setparam`,
//!   `sched_setattr`, `setpriority` (nice) mapped onto [`Params`]
//!   (the paper's example in section 2.2: a `sched_setscheduler` becomes
//!   the executive's policy).
//!
//! Refinements of the first sketch of this interface: `Params::Fixed`
//! carries an optional quantum (SCHED_RR is fixed priority with round
//! robin inside a level, not plain round robin), `Params::BestEffort`
//! carries its nice value, and [`Policy::change`] moves a task to new
//! parameters (a guest's `sched_setscheduler`), across the levels of a
//! [`hier::Hier`] if need be.
//!
//! The executive's loop, in short:
//!
//! ```
//! use mantle_sched::{Params, Policy, Standard, TaskId, PPB};
//! const MS: u64 = 1_000_000;
//! let mut policy = Standard::standard(PPB, 10 * MS);
//! let (rt, bg) = (TaskId(1), TaskId(2));
//! let edf = Params::Edf { period_ns: 10 * MS, budget_ns: 2 * MS, deadline_ns: 10 * MS };
//! policy.add(rt, edf, 0)?;
//! policy.add(bg, Params::BestEffort { nice: 0 }, 0)?;
//! // Decide, dispatch the task, wait for `until` or an event...
//! let d = policy.pick(0);
//! assert_eq!((d.task, d.until), (Some(rt), Some(2 * MS))); // EDF first, for its budget
//! // ...then say how long it ran, and decide again.
//! policy.charge(rt, 2 * MS, 2 * MS)?;
//! let d = policy.pick(2 * MS);
//! assert_eq!((d.task, d.until), (Some(bg), Some(10 * MS))); // rt throttled until its next period
//! policy.charge(bg, 8 * MS, 10 * MS)?;
//! assert_eq!(policy.pick(10 * MS).task, Some(rt));
//! // It runs 1 ms, then blocks in the kernel or in a held call: another runs.
//! policy.charge(rt, MS, 11 * MS)?;
//! policy.block(rt, 11 * MS)?;
//! assert_eq!(policy.pick(11 * MS).task, Some(bg));
//! assert!(policy.take_misses().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Invariants shared by every policy:
//! * A decision only names a task that was added, is runnable and (for
//!   EDF) has budget; `pick` never returns `until <= now` together with a
//!   task (a decision always lets the task run for at least 1 ns).
//! * Events about unknown tasks are refused with [`UnknownTask`], never a
//!   panic; time that goes backwards is treated as `now` (clamped).
//! * All arithmetic saturates or is done in `u128`: no overflow panics for
//!   any input that passed [`Params::check`].
//! * Cost: every event and decision is O(tasks) at worst (linear scans
//!   of a `BTreeMap` or queue); `pick` allocates only to record an EDF
//!   deadline miss. Meant for the tens of guests an executive multiplexes
//!   on one virtual processor.
//!
//! Tests: each policy's decisions on synthetic traces, driven by a small
//! discrete-event simulator (`sim.rs`, tests only) that plays the
//! executive's part and measures what ran when independently of the
//! policies' bookkeeping, with property tests over random parameter sets
//! from a deterministic PRNG (no dependency).

use std::fmt;

pub mod edf;
pub mod fixed;
pub mod guest;
pub mod hier;
pub mod partition;
pub mod rr;
pub mod tokens;

#[cfg(test)]
mod sim;

/// A guest thread as the executive knows it (the executive's own
/// numbering; not necessarily a Linux tid).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TaskId(pub u32);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.0)
    }
}

/// Lowest and highest fixed priority, as Linux's SCHED_FIFO/SCHED_RR
/// (`sched_get_priority_min/max`): a larger number is more important.
pub const PRIO_MIN: u8 = 1;
/// See [`PRIO_MIN`].
pub const PRIO_MAX: u8 = 99;
/// Nice range, as Linux (`MIN_NICE`, `MAX_NICE`).
pub const NICE_MIN: i8 = -20;
/// See [`NICE_MIN`].
pub const NICE_MAX: i8 = 19;
/// Longest period, deadline or quantum a task may ask for: one hour. It
/// bounds every sum of times far below `u64::MAX`.
pub const MAX_TIME_NS: u64 = 3_600 * 1_000_000_000;
/// Parts per billion: utilisation unit of [`edf::Edf`] admission.
pub const PPB: u64 = 1_000_000_000;

/// What a task asks of the executive's scheduler.
///
/// Serialized (status JSON, system files) as an object tagged by `kind`:
/// `{"kind":"edf","period_ns":10000000,"budget_ns":2000000,"deadline_ns":10000000}`,
/// `{"kind":"fixed","prio":10,"quantum_ns":null}`, `{"kind":"round-robin",
/// "quantum_ns":1000000}`, `{"kind":"best-effort","nice":0}`. Deserialized
/// values are claims: [`Params::check`] them (every policy's `add` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Params {
    /// Round robin with this quantum (handled by [`rr::RoundRobin`]).
    RoundRobin { quantum_ns: u64 },
    /// Fixed priority `prio` in `PRIO_MIN..=PRIO_MAX` (higher runs first),
    /// FIFO within a level when `quantum_ns` is `None` (SCHED_FIFO), round
    /// robin within the level with that quantum when `Some` (SCHED_RR).
    /// Handled by [`fixed::FixedPriority`].
    Fixed { prio: u8, quantum_ns: Option<u64> },
    /// An EDF reservation: `budget_ns` of CPU in every period of
    /// `period_ns`, to be received within `deadline_ns` of the period's
    /// start (`budget <= deadline <= period`, like SCHED_DEADLINE's
    /// runtime/deadline/period). Handled by [`edf::Edf`].
    Edf {
        period_ns: u64,
        budget_ns: u64,
        deadline_ns: u64,
    },
    /// No guarantee (SCHED_OTHER and the like). `nice` in
    /// `NICE_MIN..=NICE_MAX` weights its share ([`nice_weight`]); handled
    /// by [`rr::RoundRobin`], whose quantum it scales.
    BestEffort { nice: i8 },
}

/// Why [`Params::check`] refused a set of parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("the quantum is zero")]
    ZeroQuantum,
    #[error("the period is zero")]
    ZeroPeriod,
    #[error("the budget is zero")]
    ZeroBudget,
    #[error("the deadline is zero")]
    ZeroDeadline,
    #[error("budget {budget_ns} ns is longer than deadline {deadline_ns} ns")]
    BudgetOverDeadline { budget_ns: u64, deadline_ns: u64 },
    #[error("deadline {deadline_ns} ns is longer than period {period_ns} ns")]
    DeadlineOverPeriod { deadline_ns: u64, period_ns: u64 },
    #[error("{what} {value_ns} ns is longer than the limit of {MAX_TIME_NS} ns")]
    TooLong { what: &'static str, value_ns: u64 },
    #[error("priority {0} is not from {PRIO_MIN} to {PRIO_MAX}")]
    Priority(u8),
    #[error("nice {0} is not from {NICE_MIN} to {NICE_MAX}")]
    Nice(i8),
}

impl Params {
    /// Validates the parameters (the boundary check: every policy calls it
    /// in `add`, and relies on it afterwards).
    pub fn check(&self) -> Result<(), ParamError> {
        fn time(what: &'static str, v: u64, zero: ParamError) -> Result<(), ParamError> {
            if v == 0 {
                Err(zero)
            } else if v > MAX_TIME_NS {
                Err(ParamError::TooLong { what, value_ns: v })
            } else {
                Ok(())
            }
        }
        match *self {
            Params::RoundRobin { quantum_ns } => {
                time("quantum", quantum_ns, ParamError::ZeroQuantum)
            }
            Params::Fixed { prio, quantum_ns } => {
                if !(PRIO_MIN..=PRIO_MAX).contains(&prio) {
                    return Err(ParamError::Priority(prio));
                }
                match quantum_ns {
                    Some(q) => time("quantum", q, ParamError::ZeroQuantum),
                    None => Ok(()),
                }
            }
            Params::Edf {
                period_ns,
                budget_ns,
                deadline_ns,
            } => {
                time("period", period_ns, ParamError::ZeroPeriod)?;
                time("deadline", deadline_ns, ParamError::ZeroDeadline)?;
                time("budget", budget_ns, ParamError::ZeroBudget)?;
                if budget_ns > deadline_ns {
                    return Err(ParamError::BudgetOverDeadline {
                        budget_ns,
                        deadline_ns,
                    });
                }
                if deadline_ns > period_ns {
                    return Err(ParamError::DeadlineOverPeriod {
                        deadline_ns,
                        period_ns,
                    });
                }
                Ok(())
            }
            Params::BestEffort { nice } => {
                if (NICE_MIN..=NICE_MAX).contains(&nice) {
                    Ok(())
                } else {
                    Err(ParamError::Nice(nice))
                }
            }
        }
    }

    /// Short name of the kind, for status displays and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Params::RoundRobin { .. } => "round-robin",
            Params::Fixed { .. } => "fixed",
            Params::Edf { .. } => "edf",
            Params::BestEffort { .. } => "best-effort",
        }
    }
}

/// Linux's CFS/EEVDF load weight of a nice value (`sched_prio_to_weight`,
/// kernel/sched/core.c): nice 0 is 1024 and each step is about 1.25×.
/// Values outside `NICE_MIN..=NICE_MAX` are clamped.
pub fn nice_weight(nice: i8) -> u32 {
    const W: [u32; 40] = [
        88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100,
        4904, 3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172,
        137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
    ];
    let i = (nice.clamp(NICE_MIN, NICE_MAX) - NICE_MIN) as usize;
    W[i]
}

/// Why a policy refused to admit a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error("invalid parameters: {0}")]
    Invalid(#[from] ParamError),
    #[error("{0} is already scheduled")]
    Duplicate(TaskId),
    #[error("the {policy} policy does not schedule {kind} tasks")]
    Unsupported {
        policy: &'static str,
        kind: &'static str,
    },
    /// EDF admission: the task's utilisation does not fit under the bound.
    #[error(
        "{task} asks for {requested_ppb} ppb of the CPU, {used_ppb} ppb are reserved and the bound is {bound_ppb} ppb"
    )]
    Overload {
        task: TaskId,
        requested_ppb: u64,
        used_ppb: u64,
        bound_ppb: u64,
    },
    /// The token scheduler has one best-effort task.
    #[error("{existing} is already the best-effort task")]
    BestEffortTaken { existing: TaskId },
}

/// An event named a task the policy does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not scheduled by this policy")]
pub struct UnknownTask(pub TaskId);

/// A scheduling decision: run `task` (or idle when `None`) until `until`
/// at the latest (`None`: until the next event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatch {
    pub task: Option<TaskId>,
    pub until: Option<u64>,
}

impl Dispatch {
    /// Idle until `until`.
    pub fn idle(until: Option<u64>) -> Self {
        Dispatch { task: None, until }
    }
}

/// The earlier of two optional instants (`None` is "never").
pub fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A quantum with deficit accounting (round robin, and SCHED_RR levels
/// of fixed priority): what is left of it, negative when the task ran
/// past it. Debt is capped at `quantum - 1`, so a fresh quantum is never
/// shorter than 1 ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slice {
    quantum: u64,
    left: i64,
}

impl Slice {
    /// A fresh slice; `quantum_ns` passed [`Params::check`] (so it fits in
    /// an `i64`).
    pub(crate) fn new(quantum_ns: u64) -> Self {
        let quantum = quantum_ns.clamp(1, MAX_TIME_NS);
        Slice {
            quantum,
            left: quantum as i64,
        }
    }

    /// Takes `ran_ns` off; true when the quantum is used up, in which case
    /// the slice is already refilled (minus the debt).
    pub(crate) fn charge(&mut self, ran_ns: u64) -> bool {
        self.left = self.left.saturating_sub(ran_ns.min(MAX_TIME_NS) as i64);
        if self.left > 0 {
            return false;
        }
        let q = self.quantum as i64;
        self.left = self.left.max(1 - q) + q;
        true
    }

    /// A fresh quantum, minus any debt (`sched_yield`).
    pub(crate) fn refill(&mut self) {
        self.left = self.left.min(0) + self.quantum as i64;
        self.left = self.left.max(1);
    }

    /// Nanoseconds left (at least 1).
    pub(crate) fn left(&self) -> u64 {
        self.left.max(1) as u64
    }
}

/// An EDF deadline miss: `task`'s absolute deadline `deadline` passed
/// while it was runnable and still had `remaining_ns` of its reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Miss {
    pub task: TaskId,
    pub deadline: u64,
    pub remaining_ns: u64,
}

/// A scheduling policy: events in, one decision out. See the module
/// documentation for the contract of each call.
pub trait Policy {
    /// Short name, for errors and status.
    fn name(&self) -> &'static str;
    /// Whether this policy schedules tasks with these parameters (their
    /// kind; [`Policy::add`] still validates them). [`hier::Hier`] routes
    /// by it.
    fn accepts(&self, params: &Params) -> bool;
    /// Admits `task`, runnable from `now`.
    fn add(&mut self, task: TaskId, params: Params, now: u64) -> Result<(), AdmitError>;
    /// Forgets `task` (it exited, or moves to other parameters).
    fn remove(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask>;
    /// `task` is runnable again. Waking a runnable task changes nothing.
    fn wake(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask>;
    /// `task` cannot run (blocked in a held call or in the kernel).
    /// Blocking a blocked task changes nothing.
    fn block(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask>;
    /// `task` called `sched_yield`.
    fn yield_now(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask>;
    /// `task` ran `ran_ns`, ending at `now`.
    fn charge(&mut self, task: TaskId, ran_ns: u64, now: u64) -> Result<(), UnknownTask>;
    /// Which task runs now, and until when at the latest.
    fn pick(&mut self, now: u64) -> Dispatch;
    /// The parameters `task` was admitted with.
    fn params(&self, task: TaskId) -> Option<Params>;
    /// Whether `task` is runnable (`None`: unknown task).
    fn runnable(&self, task: TaskId) -> Option<bool>;
    /// Deadline misses since the last call (EDF); none by default.
    fn take_misses(&mut self) -> Vec<Miss> {
        Vec::new()
    }
    /// Changes `task`'s parameters (a guest's `sched_setscheduler`):
    /// removes it and adds it again with `params`, keeping whether it was
    /// runnable. On refusal the task keeps its old parameters (a fresh
    /// period for EDF) and the error says why.
    fn change(&mut self, task: TaskId, params: Params, now: u64) -> Result<(), ChangeError> {
        let old = self
            .params(task)
            .ok_or(ChangeError::Unknown(UnknownTask(task)))?;
        let was_runnable = self.runnable(task) == Some(true);
        params.check().map_err(AdmitError::from)?;
        self.remove(task, now)?;
        let result = match self.add(task, params, now) {
            Ok(()) => Ok(()),
            // The old parameters were admitted a moment ago and nothing
            // else changed, so they fit again; should a policy still refuse
            // them, the caller learns that the task is gone.
            Err(e) => match self.add(task, old, now) {
                Ok(()) => Err(ChangeError::Refused(e)),
                Err(again) => return Err(ChangeError::Dropped { refused: e, again }),
            },
        };
        if !was_runnable {
            self.block(task, now)?;
        }
        result
    }
}

/// Why [`Policy::change`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error(transparent)]
    Unknown(#[from] UnknownTask),
    #[error("refused: {0}")]
    Refused(#[from] AdmitError),
    /// Refused, and the old parameters were refused too: the task is no
    /// longer scheduled by this policy.
    #[error("refused ({refused}), and the old parameters too ({again}): the task was dropped")]
    Dropped {
        refused: AdmitError,
        again: AdmitError,
    },
}

/// The usual composition: EDF reservations first, then fixed priorities,
/// then round robin (and best effort) in what is left.
pub type Standard = hier::Hier<edf::Edf, hier::Hier<fixed::FixedPriority, rr::RoundRobin>>;

impl Standard {
    /// EDF bounded at `edf_bound_ppb`, fixed priorities, round robin whose
    /// best-effort quantum (nice 0) is `best_effort_quantum_ns`.
    pub fn standard(edf_bound_ppb: u64, best_effort_quantum_ns: u64) -> Self {
        hier::Hier::new(
            edf::Edf::new(edf_bound_ppb),
            hier::Hier::new(
                fixed::FixedPriority::new(),
                rr::RoundRobin::new(best_effort_quantum_ns),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_accepts_and_refuses() {
        assert_eq!(Params::RoundRobin { quantum_ns: 1 }.check(), Ok(()));
        assert_eq!(
            Params::RoundRobin { quantum_ns: 0 }.check(),
            Err(ParamError::ZeroQuantum)
        );
        assert!(matches!(
            Params::RoundRobin {
                quantum_ns: MAX_TIME_NS + 1
            }
            .check(),
            Err(ParamError::TooLong { .. })
        ));
        for prio in 0..=u8::MAX {
            let ok = (PRIO_MIN..=PRIO_MAX).contains(&prio);
            let p = Params::Fixed {
                prio,
                quantum_ns: None,
            };
            assert_eq!(p.check().is_ok(), ok, "prio {prio}");
        }
        assert_eq!(
            Params::Fixed {
                prio: 5,
                quantum_ns: Some(0)
            }
            .check(),
            Err(ParamError::ZeroQuantum)
        );
        for nice in i8::MIN..=i8::MAX {
            let ok = (NICE_MIN..=NICE_MAX).contains(&nice);
            assert_eq!(
                Params::BestEffort { nice }.check().is_ok(),
                ok,
                "nice {nice}"
            );
        }
        let edf = |period_ns, budget_ns, deadline_ns| Params::Edf {
            period_ns,
            budget_ns,
            deadline_ns,
        };
        assert_eq!(edf(10, 5, 10).check(), Ok(()));
        assert_eq!(edf(10, 10, 10).check(), Ok(()));
        assert_eq!(edf(0, 5, 10).check(), Err(ParamError::ZeroPeriod));
        assert_eq!(edf(10, 0, 10).check(), Err(ParamError::ZeroBudget));
        assert_eq!(edf(10, 5, 0).check(), Err(ParamError::ZeroDeadline));
        assert_eq!(
            edf(10, 6, 5).check(),
            Err(ParamError::BudgetOverDeadline {
                budget_ns: 6,
                deadline_ns: 5
            })
        );
        assert_eq!(
            edf(10, 5, 11).check(),
            Err(ParamError::DeadlineOverPeriod {
                deadline_ns: 11,
                period_ns: 10
            })
        );
        assert!(matches!(
            edf(MAX_TIME_NS + 1, 5, 10).check(),
            Err(ParamError::TooLong { what: "period", .. })
        ));
    }

    #[test]
    fn nice_weights_are_linux_table() {
        assert_eq!(nice_weight(0), 1024);
        assert_eq!(nice_weight(-20), 88761);
        assert_eq!(nice_weight(19), 15);
        assert_eq!(nice_weight(i8::MIN), 88761);
        assert_eq!(nice_weight(i8::MAX), 15);
        for n in NICE_MIN..NICE_MAX {
            assert!(nice_weight(n) > nice_weight(n + 1), "nice {n}");
        }
    }

    #[test]
    fn params_json_is_tagged_by_kind() {
        let all = [
            Params::Edf {
                period_ns: 10,
                budget_ns: 2,
                deadline_ns: 10,
            },
            Params::Fixed {
                prio: 10,
                quantum_ns: None,
            },
            Params::RoundRobin { quantum_ns: 5 },
            Params::BestEffort { nice: -3 },
        ];
        let json: Vec<String> = all
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        assert_eq!(
            json,
            [
                r#"{"kind":"edf","period_ns":10,"budget_ns":2,"deadline_ns":10}"#,
                r#"{"kind":"fixed","prio":10,"quantum_ns":null}"#,
                r#"{"kind":"round-robin","quantum_ns":5}"#,
                r#"{"kind":"best-effort","nice":-3}"#,
            ]
        );
        for (p, j) in all.iter().zip(&json) {
            assert_eq!(&serde_json::from_str::<Params>(j).unwrap(), p);
        }
        assert!(serde_json::from_str::<Params>(r#"{"kind":"lottery"}"#).is_err());
        assert_eq!(serde_json::to_string(&TaskId(4)).unwrap(), "4");
    }

    #[test]
    fn earliest_of_options() {
        assert_eq!(earliest(None, None), None);
        assert_eq!(earliest(Some(3), None), Some(3));
        assert_eq!(earliest(None, Some(4)), Some(4));
        assert_eq!(earliest(Some(5), Some(4)), Some(4));
    }
}

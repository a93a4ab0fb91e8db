//! Earliest deadline first over constant-bandwidth reservations with hard
//! budget enforcement (the issue's "an overrunning guest is throttled
//! until its next period"; what a guest's `sched_setattr(SCHED_DEADLINE)`
//! becomes, seeds/001 section 2.2).
//!
//! Each task has a budget `C`, a relative deadline `D` and a period `P`
//! (`C <= D <= P`, [`Params::Edf`]); it holds an absolute scheduling
//! deadline `d` and what is left of its budget `q`. The rules are Linux
//! SCHED_DEADLINE's, i.e. the Constant Bandwidth Server with hard
//! reservations (Documentation/scheduler/sched-deadline.rst, sections 2
//! and 3; Abeni and Buttazzo, "Integrating multimedia applications in
//! hard real-time systems", RTSS 1998):
//!
//! * **Pick**: the ready task (runnable, not throttled) with the earliest
//!   `d` runs (ties: the lower [`TaskId`]), until the earliest of: its
//!   budget running out (`now + q`), its deadline, and the next
//!   replenishment of a throttled task (which may preempt).
//! * **Admit** (`add`): a task starts with `d = now + D`, `q = C`.
//! * **Charge**: `q -= ran`. At `q <= 0` the task is **throttled** (hard
//!   reservation: it does not run again in this period, even if the CPU is
//!   idle) until its replenishment instant `d - D + P`, the start of its
//!   next period; there, as Linux's `replenish_dl_entity`, `d += P` and
//!   `q += C` until `q > 0` (an overrun, from a late charge, is paid back
//!   from the next periods), and if `d` is already past, a fresh period
//!   `d = now + D`, `q = C`.
//! * **Wake** (CBS wake-up rule, Linux `update_dl_entity`): if `d <= now`
//!   or the task's leftover would exceed its density over what remains
//!   (`q / (d - now) > C / D`), then for an implicit deadline (`D = P`) a
//!   fresh period `d = now + D`, `q = C`; for a constrained one (`D < P`)
//!   with `d` still ahead, the *revised* rule keeps `d` and cuts
//!   `q = C (d - now) / D` (Linux `update_dl_revised_wakeup`, 4.13+) —
//!   unless the task has used none of this window's budget (`q = C`: it
//!   was added, or replenished, while blocked), which gets a fresh period
//!   instead: a new job should not be cut by a window it never used
//!   (Linux would cut it; this is where we differ). So a sporadic task
//!   gets its reservation aligned to its own arrivals, and a task's
//!   demand never exceeds `C` over one of its windows of length `D`,
//!   which never overlap.
//! * **Yield** (`sched_yield` from a SCHED_DEADLINE task means "this job
//!   is done", Linux `yield_task_dl`): the rest of the budget is dropped
//!   and the task is throttled until its next period.
//! * **Deadline miss**: `d` passes while the task is ready with `q > 0`
//!   (it wanted the CPU and was owed budget). It is recorded
//!   ([`Policy::take_misses`], [`EdfStats::misses`]), the leftover is
//!   dropped and the task waits for its next period as if throttled. A
//!   miss spanning several periods (the executive was away) is one miss.
//!
//! **Admission**: the sum of densities `C / D` (in parts per billion,
//! rounded up) must stay within the bound given to [`Edf::new`] (at most
//! 1: one CPU). Density is a sufficient test for EDF on one CPU (Liu and
//! Layland for `D = P`; for `D < P` the density bound is sufficient, not
//! necessary), so admitted tasks never miss a deadline if the executive
//! dispatches at the instants `pick` asks for — the test
//! `feasible_sets_meet_every_deadline` checks this on random sets. Linux
//! admits on bandwidth `C / P` against 95% by default
//! (`sched_rt_runtime_us`), which guarantees bounded tardiness, not
//! deadlines, when `D < P`; set the bound to 950 000 000 to keep Linux's
//! headroom.
//!
//! Not implemented: SCHED_FLAG_RECLAIM (GRUB reclaiming of unused
//! bandwidth) and deadline inheritance; a throttled task is not run in
//! idle time (put a [`super::hier::Hier`] bottom policy underneath for
//! that).

use super::{AdmitError, Dispatch, Miss, Params, Policy, TaskId, UnknownTask};
use super::{MAX_TIME_NS, PPB};
use std::collections::BTreeMap;

/// Per-task counters, for status displays and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EdfStats {
    /// CPU time charged in total.
    pub received_ns: u64,
    /// Times the budget ran out (or was given up by a yield).
    pub throttles: u64,
    /// Deadlines missed.
    pub misses: u64,
    /// Budget replenishments (periods started).
    pub replenishments: u64,
}

#[derive(Debug, Clone)]
struct Task {
    budget: u64,
    deadline_rel: u64,
    period: u64,
    density_ppb: u64,
    /// Absolute scheduling deadline.
    d: u64,
    /// Budget left; negative: overrun to be paid back.
    q: i64,
    runnable: bool,
    throttled: bool,
    stats: EdfStats,
}

impl Task {
    fn params(&self) -> Params {
        Params::Edf {
            period_ns: self.period,
            budget_ns: self.budget,
            deadline_ns: self.deadline_rel,
        }
    }

    /// Start of the next period: where a throttled task is replenished.
    fn replenish_at(&self) -> u64 {
        (self.d - self.deadline_rel).saturating_add(self.period)
    }

    fn ready(&self) -> bool {
        self.runnable && !self.throttled && self.q > 0
    }

    fn fresh_period(&mut self, now: u64) {
        self.d = now.saturating_add(self.deadline_rel);
        self.q = self.budget as i64;
        self.throttled = false;
        self.stats.replenishments += 1;
    }

    fn throttle(&mut self) {
        if !self.throttled {
            self.throttled = true;
            self.stats.throttles += 1;
        }
    }
}

/// EDF with CBS hard reservations; see the module documentation.
#[derive(Debug, Clone)]
pub struct Edf {
    bound_ppb: u64,
    used_ppb: u64,
    tasks: BTreeMap<TaskId, Task>,
    misses: Vec<Miss>,
    now: u64,
}

/// `C / D` in parts per billion, rounded up (admission stays safe).
pub(super) fn density_ppb(budget: u64, deadline: u64) -> u64 {
    (u128::from(budget) * u128::from(PPB)).div_ceil(u128::from(deadline)) as u64
}

impl Edf {
    /// An EDF scheduler admitting total density up to `bound_ppb` parts
    /// per billion of one CPU (clamped to [`PPB`]).
    pub fn new(bound_ppb: u64) -> Self {
        Edf {
            bound_ppb: bound_ppb.min(PPB),
            used_ppb: 0,
            tasks: BTreeMap::new(),
            misses: Vec::new(),
            now: 0,
        }
    }

    /// Density reserved so far (ppb).
    pub fn used_ppb(&self) -> u64 {
        self.used_ppb
    }

    /// The admission bound (ppb).
    pub fn bound_ppb(&self) -> u64 {
        self.bound_ppb
    }

    /// `task`'s counters.
    pub fn stats(&self, task: TaskId) -> Option<EdfStats> {
        self.tasks.get(&task).map(|t| t.stats)
    }

    /// `task`'s current absolute deadline and budget left (ns, 0 when
    /// overrun), for status displays.
    pub fn deadline_and_budget(&self, task: TaskId) -> Option<(u64, u64)> {
        self.tasks.get(&task).map(|t| (t.d, t.q.max(0) as u64))
    }

    fn task(&mut self, task: TaskId) -> Result<&mut Task, UnknownTask> {
        self.tasks.get_mut(&task).ok_or(UnknownTask(task))
    }

    /// Brings every task to time `now` (clamped to never go back):
    /// deadline misses, then replenishments that are due.
    fn advance(&mut self, now: u64) {
        let now = now.max(self.now);
        self.now = now;
        for (&id, t) in &mut self.tasks {
            if t.ready() && t.d <= now {
                t.stats.misses += 1;
                self.misses.push(Miss {
                    task: id,
                    deadline: t.d,
                    remaining_ns: t.q as u64,
                });
                // Drop the leftover; wait for the next period.
                t.q = 0;
                t.throttled = true;
            }
            if t.throttled && t.replenish_at() <= now {
                // Linux replenish_dl_entity: pay the overrun back from the
                // following periods, then start afresh if that is still
                // in the past.
                // (`while q <= 0 { d += P; q += C }` in closed form: a
                // large debt on a small budget must not loop for long.)
                let periods = t.q.unsigned_abs() / t.budget + 1;
                t.d = t.d.saturating_add(periods.saturating_mul(t.period));
                t.q += (periods * t.budget) as i64;
                t.throttled = false;
                t.stats.replenishments += 1;
                if t.d <= now {
                    t.fresh_period(now);
                }
            }
        }
    }
}

impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }

    fn accepts(&self, params: &Params) -> bool {
        matches!(params, Params::Edf { .. })
    }

    fn add(&mut self, task: TaskId, params: Params, now: u64) -> Result<(), AdmitError> {
        let Params::Edf {
            period_ns,
            budget_ns,
            deadline_ns,
        } = params
        else {
            return Err(AdmitError::Unsupported {
                policy: self.name(),
                kind: params.kind(),
            });
        };
        params.check()?;
        if self.tasks.contains_key(&task) {
            return Err(AdmitError::Duplicate(task));
        }
        let density = density_ppb(budget_ns, deadline_ns);
        if self.used_ppb + density > self.bound_ppb {
            return Err(AdmitError::Overload {
                task,
                requested_ppb: density,
                used_ppb: self.used_ppb,
                bound_ppb: self.bound_ppb,
            });
        }
        self.advance(now);
        self.used_ppb += density;
        let mut t = Task {
            budget: budget_ns,
            deadline_rel: deadline_ns,
            period: period_ns,
            density_ppb: density,
            d: 0,
            q: 0,
            runnable: true,
            throttled: false,
            stats: EdfStats::default(),
        };
        t.fresh_period(self.now);
        self.tasks.insert(task, t);
        Ok(())
    }

    fn remove(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.advance(now);
        let t = self.tasks.remove(&task).ok_or(UnknownTask(task))?;
        self.used_ppb -= t.density_ppb;
        Ok(())
    }

    fn wake(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.task(task)?;
        self.advance(now);
        let now = self.now;
        let t = self.task(task)?;
        if t.runnable {
            return Ok(());
        }
        t.runnable = true;
        if t.throttled {
            // Its replenishment timer decides.
            return Ok(());
        }
        // CBS wake-up rule: q / (d - now) > C / D, cross-multiplied.
        let overflow = t.d <= now
            || u128::from(t.q.max(0) as u64) * u128::from(t.deadline_rel)
                > u128::from(t.d - now) * u128::from(t.budget);
        if overflow {
            // The revised rule only for a task that already used some of
            // this window's budget (it blocked mid-job): one that used
            // none may take a fresh window starting now, which overlaps
            // no other window of its own with any demand in it.
            if t.deadline_rel < t.period && t.d > now && t.q < t.budget as i64 {
                let cut = u128::from(t.budget) * u128::from(t.d - now) / u128::from(t.deadline_rel);
                t.q = cut as i64;
            } else {
                t.fresh_period(now);
            }
        }
        Ok(())
    }

    fn block(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.task(task)?;
        self.advance(now);
        self.task(task)?.runnable = false;
        Ok(())
    }

    fn yield_now(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.task(task)?;
        self.advance(now);
        let t = self.task(task)?;
        if !t.throttled {
            t.q = t.q.min(0);
            t.throttle();
        }
        Ok(())
    }

    fn charge(&mut self, task: TaskId, ran_ns: u64, now: u64) -> Result<(), UnknownTask> {
        self.task(task)?;
        let ran = ran_ns.min(MAX_TIME_NS);
        self.advance(now.saturating_sub(ran));
        let t = self.task(task)?;
        t.stats.received_ns = t.stats.received_ns.saturating_add(ran);
        t.q = t.q.saturating_sub(ran as i64);
        if t.q <= 0 {
            t.throttle();
        }
        self.advance(now);
        Ok(())
    }

    fn pick(&mut self, now: u64) -> Dispatch {
        self.advance(now);
        let now = self.now;
        let next_replenish = self
            .tasks
            .values()
            .filter(|t| t.throttled)
            .map(Task::replenish_at)
            .min();
        let best = self
            .tasks
            .iter()
            .filter(|(_, t)| t.ready())
            .min_by_key(|(&id, t)| (t.d, id));
        match best {
            Some((&id, t)) => {
                let until = now.saturating_add(t.q as u64).min(t.d);
                Dispatch {
                    task: Some(id),
                    until: Some(next_replenish.map_or(until, |r| until.min(r))),
                }
            }
            None => Dispatch::idle(next_replenish),
        }
    }

    fn params(&self, task: TaskId) -> Option<Params> {
        self.tasks.get(&task).map(Task::params)
    }

    fn runnable(&self, task: TaskId) -> Option<bool> {
        self.tasks.get(&task).map(|t| t.runnable)
    }

    fn take_misses(&mut self) -> Vec<Miss> {
        std::mem::take(&mut self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::super::hier::Hier;
    use super::super::rr::RoundRobin;
    use super::super::sim::{Load, Rng, Sim};
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn edf(period_ns: u64, budget_ns: u64, deadline_ns: u64) -> Params {
        Params::Edf {
            period_ns,
            budget_ns,
            deadline_ns,
        }
    }

    #[test]
    fn feasible_sets_meet_every_deadline() {
        // Property: random task sets with total density up to 1 (periods
        // 1–50 ms, constrained or implicit deadlines, random phases, jobs
        // of up to their budget), plus a background spinner under the
        // EDF level: every job finishes by its deadline, as the
        // simulator measures it, and the policy reports no miss.
        let mut rng = Rng::new(7);
        let mut jobs_checked = 0;
        for case in 0..150 {
            let n = rng.range(1, 6) as usize;
            let total_ppb = rng.range(PPB / 2, PPB);
            let weights: Vec<u64> = (0..n).map(|_| rng.range(1, 100)).collect();
            let wsum: u64 = weights.iter().sum();
            let mut sim = Sim::new(Hier::new(Edf::new(PPB), RoundRobin::new(MS)));
            let mut sets = Vec::new();
            for (i, w) in weights.iter().enumerate() {
                let period = rng.range(MS, 50 * MS);
                let deadline = if rng.chance(1, 2) {
                    period
                } else {
                    rng.range(period / 4, period)
                };
                // Budget: this task's share of the total density, rounded
                // down (so the rounded-up admission still fits).
                let density = total_ppb * w / wsum;
                let budget = (u128::from(deadline) * u128::from(density) / u128::from(PPB)) as u64;
                let budget = budget.saturating_sub(1).max(1);
                let work = if rng.chance(1, 3) {
                    rng.range(1, budget)
                } else {
                    budget
                };
                let id = TaskId(i as u32);
                sim.policy
                    .add(id, edf(period, budget, deadline), 0)
                    .unwrap_or_else(|e| panic!("case {case}: {e}"));
                sim.task(
                    id,
                    Load::Periodic {
                        period_ns: period,
                        work_ns: work,
                        phase_ns: rng.range(0, period),
                    },
                );
                sets.push((period, budget, deadline, work));
            }
            let bg = TaskId(99);
            sim.policy
                .add(bg, Params::BestEffort { nice: 0 }, 0)
                .unwrap();
            sim.task(bg, Load::Spin);
            sim.run(S);
            for j in &sim.jobs {
                let (_, _, deadline, _) = sets[j.task.0 as usize];
                assert!(
                    j.finish <= j.arrival + deadline,
                    "case {case}: {j:?} misses its deadline {deadline}; set {sets:?}"
                );
                jobs_checked += 1;
            }
            assert_eq!(
                sim.policy.take_misses(),
                vec![],
                "case {case}: set {sets:?}"
            );
        }
        assert!(jobs_checked > 10_000, "{jobs_checked} jobs");
    }

    #[test]
    fn overrunning_task_is_throttled_to_its_budget() {
        // An always-runnable EDF task with 2 ms every 10 ms, over a
        // round-robin spinner: it gets exactly 2 ms in each period, the
        // spinner the other 8 ms (the CPU is never left idle).
        let mut sim = Sim::new(Hier::new(Edf::new(PPB), RoundRobin::new(MS)));
        let (hog, bg) = (TaskId(1), TaskId(2));
        sim.policy
            .add(hog, edf(10 * MS, 2 * MS, 10 * MS), 0)
            .unwrap();
        sim.task(hog, Load::Spin);
        sim.policy
            .add(bg, Params::RoundRobin { quantum_ns: 3 * MS }, 0)
            .unwrap();
        sim.task(bg, Load::Spin);
        sim.run(S);
        for k in 0..100 {
            let (from, to) = (k * 10 * MS, (k + 1) * 10 * MS);
            assert_eq!(sim.received(hog, from, to), 2 * MS, "period {k}");
            assert_eq!(sim.received(bg, from, to), 8 * MS, "period {k}");
        }
        let stats = sim.policy.top().stats(hog).unwrap();
        assert_eq!(stats.throttles, 100);
        assert_eq!(stats.misses, 0);
    }

    #[test]
    fn overrun_from_late_dispatch_is_paid_back() {
        // Property: the executive overshoots every decision by up to
        // 300 µs; over a second each hog still gets its budget per period
        // on average (within one overshoot), because the overrun is taken
        // from the next period.
        let mut rng = Rng::new(11);
        for case in 0..40 {
            let mut sim = Sim::new(Hier::new(Edf::new(PPB), RoundRobin::new(MS)));
            sim.overshoot = Some((Rng::new(case), 300 * US));
            let mut hogs = Vec::new();
            for i in 0..rng.range(1, 3) as u32 {
                let period = rng.range(5 * MS, 20 * MS);
                let budget = rng.range(MS, period / 4);
                sim.policy
                    .add(TaskId(i), edf(period, budget, period), 0)
                    .unwrap();
                sim.task(TaskId(i), Load::Spin);
                hogs.push((period, budget));
            }
            sim.policy
                .add(TaskId(50), Params::BestEffort { nice: 0 }, 0)
                .unwrap();
            sim.task(TaskId(50), Load::Spin);
            sim.run(S);
            for (i, &(period, budget)) in hogs.iter().enumerate() {
                let periods = sim.now.div_ceil(period);
                let got = sim.received(TaskId(i as u32), 0, sim.now);
                assert!(
                    got <= periods * budget + 300 * US,
                    "case {case} hog {i}: {got} ns in {periods} periods of {budget}"
                );
            }
        }
    }

    #[test]
    fn refuses_an_infeasible_admission_and_says_why() {
        let mut p = Edf::new(PPB);
        p.add(TaskId(1), edf(10 * MS, 5 * MS, 10 * MS), 0).unwrap();
        p.add(TaskId(2), edf(10 * MS, 3 * MS, 6 * MS), 0).unwrap();
        assert_eq!(p.used_ppb(), PPB);
        assert_eq!(
            p.add(TaskId(3), edf(S, 1, S), 0),
            Err(AdmitError::Overload {
                task: TaskId(3),
                requested_ppb: 1,
                used_ppb: PPB,
                bound_ppb: PPB
            })
        );
        p.remove(TaskId(2), 1).unwrap();
        p.add(TaskId(3), edf(S, S / 2, S), 1).unwrap();
        // A lower bound (Linux's 95%).
        let mut p = Edf::new(950_000_000);
        assert!(matches!(
            p.add(TaskId(1), edf(10, 10, 10), 0),
            Err(AdmitError::Overload {
                requested_ppb: PPB,
                ..
            })
        ));
        p.add(TaskId(1), edf(20, 19, 20), 0).unwrap();
        // Bounds above one CPU are clamped.
        assert_eq!(Edf::new(3 * PPB).bound_ppb(), PPB);
        // Invalid and foreign parameters, duplicates, unknown tasks.
        assert!(matches!(
            p.add(TaskId(2), edf(10, 11, 10), 0),
            Err(AdmitError::Invalid(_))
        ));
        assert!(matches!(
            p.add(TaskId(2), Params::BestEffort { nice: 0 }, 0),
            Err(AdmitError::Unsupported { .. })
        ));
        assert_eq!(
            p.add(TaskId(1), edf(100, 1, 100), 0),
            Err(AdmitError::Duplicate(TaskId(1)))
        );
        let x = TaskId(9);
        for r in [
            p.wake(x, 0),
            p.block(x, 0),
            p.yield_now(x, 0),
            p.charge(x, 1, 1),
            p.remove(x, 1),
        ] {
            assert_eq!(r, Err(UnknownTask(x)));
        }
    }

    #[test]
    fn density_is_rounded_up() {
        assert_eq!(density_ppb(1, 3), 333_333_334);
        assert_eq!(density_ppb(3, 3), PPB);
        assert_eq!(density_ppb(MAX_TIME_NS, MAX_TIME_NS), PPB);
        let mut p = Edf::new(PPB);
        for i in 0..3 {
            p.add(TaskId(i), edf(3, 1, 3), 0).unwrap_or_else(|e| {
                assert_eq!(i, 2, "{e}");
            });
        }
        assert_eq!(p.used_ppb(), 666_666_668);
    }

    #[test]
    fn a_late_executive_causes_a_reported_miss() {
        let mut p = Edf::new(PPB);
        let (a, b) = (TaskId(1), TaskId(2));
        p.add(a, edf(10 * MS, 2 * MS, 5 * MS), 0).unwrap();
        p.add(b, edf(10 * MS, 2 * MS, 6 * MS), 0).unwrap();
        let d = p.pick(0);
        assert_eq!(
            d,
            Dispatch {
                task: Some(a),
                until: Some(2 * MS)
            }
        );
        // The executive comes back 7 ms late: b's deadline (6 ms) passed
        // while it was ready and owed 2 ms.
        p.charge(a, 9 * MS, 9 * MS).unwrap();
        assert_eq!(
            p.take_misses(),
            vec![Miss {
                task: b,
                deadline: 6 * MS,
                remaining_ns: 2 * MS
            }]
        );
        assert!(p.take_misses().is_empty());
        assert_eq!(p.stats(b).unwrap().misses, 1);
        // Both wait for their next period (a overran by 7 ms: paid back).
        assert_eq!(p.pick(9 * MS), Dispatch::idle(Some(10 * MS)));
        let d = p.pick(10 * MS);
        assert_eq!(d.task, Some(b), "a is still paying its overrun back");
    }

    #[test]
    fn a_huge_overrun_is_paid_back_in_closed_form() {
        // One hour of overrun on a 1 ns budget: 3.6e12 periods of debt,
        // settled without looping over them.
        let mut p = Edf::new(PPB);
        let a = TaskId(1);
        p.add(a, edf(10, 1, 10), 0).unwrap();
        p.charge(a, u64::MAX, u64::MAX / 2).unwrap();
        assert_eq!(p.deadline_and_budget(a).map(|(_, q)| q), Some(1));
        assert_eq!(p.pick(u64::MAX / 2).task, Some(a));
        assert_eq!(p.stats(a).unwrap().received_ns, MAX_TIME_NS);
    }

    #[test]
    fn yield_gives_up_the_rest_of_the_period() {
        let mut p = Edf::new(PPB);
        let a = TaskId(1);
        p.add(a, edf(10 * MS, 4 * MS, 10 * MS), 0).unwrap();
        p.charge(a, MS, MS).unwrap();
        p.yield_now(a, MS).unwrap();
        assert_eq!(p.pick(MS), Dispatch::idle(Some(10 * MS)));
        assert_eq!(p.stats(a).unwrap().throttles, 1);
        assert_eq!(
            p.pick(10 * MS),
            Dispatch {
                task: Some(a),
                until: Some(14 * MS)
            }
        );
        assert_eq!(p.deadline_and_budget(a), Some((20 * MS, 4 * MS)));
    }

    #[test]
    fn wake_up_rule() {
        // Implicit deadline: waking late with too much budget left for
        // what remains of the period starts a fresh period.
        let mut p = Edf::new(PPB);
        let a = TaskId(1);
        p.add(a, edf(10 * MS, 4 * MS, 10 * MS), 0).unwrap();
        p.block(a, 0).unwrap();
        p.wake(a, 8 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(a), Some((18 * MS, 4 * MS)));
        // Enough room left: the deadline and budget are kept.
        p.charge(a, MS, 9 * MS).unwrap();
        p.block(a, 9 * MS).unwrap();
        p.wake(a, 10 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(a), Some((18 * MS, 3 * MS)));
        // Constrained deadline, deadline still ahead, some budget used:
        // the budget is cut to the density over what remains, the
        // deadline kept.
        let b = TaskId(2);
        p.add(b, edf(20 * MS, 2 * MS, 4 * MS), 10 * MS).unwrap();
        p.charge(b, MS / 2, 10 * MS + MS / 2).unwrap();
        p.block(b, 10 * MS + MS / 2).unwrap();
        p.wake(b, 13 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(b), Some((14 * MS, MS / 2)));
        // None of the window used: a fresh window from the wake-up.
        let c = TaskId(3);
        p.add(c, edf(20 * MS, MS / 4, 4 * MS), 10 * MS).unwrap();
        p.block(c, 10 * MS).unwrap();
        p.wake(c, 13 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(c), Some((17 * MS, MS / 4)));
        // Past the deadline: a fresh period.
        p.block(b, 13 * MS).unwrap();
        p.wake(b, 15 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(b), Some((19 * MS, 2 * MS)));
        // Waking a runnable task changes nothing.
        p.wake(b, 16 * MS).unwrap();
        assert_eq!(p.deadline_and_budget(b), Some((19 * MS, 2 * MS)));
        assert_eq!(p.runnable(b), Some(true));
        assert!(p.take_misses().is_empty());
    }

    #[test]
    fn earliest_deadline_runs_and_a_replenishment_preempts() {
        let mut p = Edf::new(PPB);
        let (long, short) = (TaskId(1), TaskId(2));
        p.add(long, edf(100 * MS, 50 * MS, 100 * MS), 0).unwrap();
        p.add(short, edf(10 * MS, 2 * MS, 10 * MS), 0).unwrap();
        assert_eq!(
            p.pick(0),
            Dispatch {
                task: Some(short),
                until: Some(2 * MS)
            }
        );
        p.charge(short, 2 * MS, 2 * MS).unwrap();
        // long runs, but must come back at short's replenishment.
        assert_eq!(
            p.pick(2 * MS),
            Dispatch {
                task: Some(long),
                until: Some(10 * MS)
            }
        );
        p.charge(long, 8 * MS, 10 * MS).unwrap();
        assert_eq!(p.pick(10 * MS).task, Some(short));
    }
}

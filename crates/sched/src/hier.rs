//! Hierarchical composition of two policies: the bottom one runs only in
//! the top one's idle time (seeds/001 section 2.1: "any scheduling policy
//! can be hierarchically composed within the executive, as is the case
//! with the work on Hierarchical Loadable Schedulers (HLS)").
//!
//! Decides: ask the top policy; if it picks a task, that task runs until
//! the top's `until`. If the top is idle, the bottom's pick runs, until
//! the earlier of the bottom's `until` and the top's (the instant the top
//! may want the CPU back: an EDF release, say). This is HLS's strict
//! priority composition of a real-time scheduler over a time-sharing one.
//!
//! Routing: a task belongs to the top policy if the top [`Policy::accepts`]
//! its parameters, else to the bottom if it does; events go to the policy
//! that holds the task, charges too (the bottom is charged only for what
//! its tasks ran, in the top's idle time). [`Policy::change`] can move a
//! task from one side to the other (a guest switching from SCHED_OTHER to
//! SCHED_DEADLINE).
//!
//! Invariants: a bottom task is picked only when the top has nothing
//! runnable; the composition's `until` is never later than the top's.

use super::{earliest, AdmitError, Dispatch, Miss, Params, Policy, TaskId, UnknownTask};

/// `top` over `bottom`; see the module documentation.
#[derive(Debug, Clone)]
pub struct Hier<T, B> {
    top: T,
    bottom: B,
}

impl<T: Policy, B: Policy> Hier<T, B> {
    pub fn new(top: T, bottom: B) -> Self {
        Hier { top, bottom }
    }
    pub fn top(&self) -> &T {
        &self.top
    }
    pub fn top_mut(&mut self) -> &mut T {
        &mut self.top
    }
    pub fn bottom(&self) -> &B {
        &self.bottom
    }
    pub fn bottom_mut(&mut self) -> &mut B {
        &mut self.bottom
    }

    /// The policy holding `task`, as a trait object.
    fn owner(&mut self, task: TaskId) -> Result<&mut dyn Policy, UnknownTask> {
        if self.top.params(task).is_some() {
            Ok(&mut self.top)
        } else if self.bottom.params(task).is_some() {
            Ok(&mut self.bottom)
        } else {
            Err(UnknownTask(task))
        }
    }
}

impl<T: Policy, B: Policy> Policy for Hier<T, B> {
    fn name(&self) -> &'static str {
        "hierarchical"
    }

    fn accepts(&self, params: &Params) -> bool {
        self.top.accepts(params) || self.bottom.accepts(params)
    }

    fn add(&mut self, task: TaskId, params: Params, now: u64) -> Result<(), AdmitError> {
        if self.params(task).is_some() {
            return Err(AdmitError::Duplicate(task));
        }
        if self.top.accepts(&params) {
            self.top.add(task, params, now)
        } else if self.bottom.accepts(&params) {
            self.bottom.add(task, params, now)
        } else {
            Err(AdmitError::Unsupported {
                policy: self.name(),
                kind: params.kind(),
            })
        }
    }

    fn remove(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.owner(task)?.remove(task, now)
    }

    fn wake(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.owner(task)?.wake(task, now)
    }

    fn block(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.owner(task)?.block(task, now)
    }

    fn yield_now(&mut self, task: TaskId, now: u64) -> Result<(), UnknownTask> {
        self.owner(task)?.yield_now(task, now)
    }

    fn charge(&mut self, task: TaskId, ran_ns: u64, now: u64) -> Result<(), UnknownTask> {
        self.owner(task)?.charge(task, ran_ns, now)
    }

    fn pick(&mut self, now: u64) -> Dispatch {
        let top = self.top.pick(now);
        if top.task.is_some() {
            return top;
        }
        let bottom = self.bottom.pick(now);
        Dispatch {
            task: bottom.task,
            until: earliest(top.until, bottom.until),
        }
    }

    fn params(&self, task: TaskId) -> Option<Params> {
        self.top.params(task).or_else(|| self.bottom.params(task))
    }

    fn runnable(&self, task: TaskId) -> Option<bool> {
        self.top
            .runnable(task)
            .or_else(|| self.bottom.runnable(task))
    }

    fn take_misses(&mut self) -> Vec<Miss> {
        let mut m = self.top.take_misses();
        m.extend(self.bottom.take_misses());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixed::FixedPriority;
    use super::super::rr::RoundRobin;
    use super::super::sim::{Load, Rng, Sim};
    use super::super::{Standard, PPB};
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn bottom_runs_only_in_the_top_idle_time() {
        // Fixed priority over round robin: a periodic fixed-priority task
        // takes 3 ms of every 10; the two round-robin spinners share the
        // rest and never run while it is runnable.
        let mut sim = Sim::new(Hier::new(FixedPriority::new(), RoundRobin::new(MS)));
        let top = TaskId(1);
        sim.policy
            .add(
                top,
                Params::Fixed {
                    prio: 5,
                    quantum_ns: None,
                },
                0,
            )
            .unwrap();
        sim.task(
            top,
            Load::Periodic {
                period_ns: 10 * MS,
                work_ns: 3 * MS,
                phase_ns: 0,
            },
        );
        for t in [TaskId(2), TaskId(3)] {
            sim.policy
                .add(t, Params::RoundRobin { quantum_ns: MS / 2 }, 0)
                .unwrap();
            sim.task(t, Load::Spin);
        }
        sim.run(1_000 * MS);
        // The top task runs at each release for 3 ms straight.
        for j in sim.jobs.iter().filter(|j| j.task == top) {
            assert_eq!(j.finish - j.arrival, 3 * MS, "{j:?}");
        }
        for s in sim.spans.iter().filter(|s| s.task != top) {
            let in_period = s.start % (10 * MS);
            assert!(
                in_period >= 3 * MS,
                "bottom ran at {} during the top's job",
                s.start
            );
        }
        assert_eq!(sim.received(top, 0, sim.now), 300 * MS);
        assert_eq!(sim.received(TaskId(2), 0, sim.now), 350 * MS);
        assert_eq!(sim.received(TaskId(3), 0, sim.now), 350 * MS);
    }

    #[test]
    fn bottom_never_picked_while_the_top_has_a_ready_task() {
        // Property over random traces on the standard stack (EDF over
        // fixed priority over round robin): random tasks of every kind,
        // random wakes, blocks, yields and runs of random length (also
        // past `until`). Whenever a lower level's task is picked, the
        // levels above it have nothing to run at that instant.
        let mut rng = Rng::new(17);
        for case in 0..100 {
            let mut p = Standard::standard(PPB, MS);
            let n = rng.range(2, 9) as u32;
            for i in 0..n {
                let params = match rng.range(0, 3) {
                    0 => {
                        let period = rng.range(MS, 20 * MS);
                        Params::Edf {
                            period_ns: period,
                            budget_ns: rng.range(1, period / 5),
                            deadline_ns: rng.range(period / 2, period),
                        }
                    }
                    1 => Params::Fixed {
                        prio: rng.range(1, 99) as u8,
                        quantum_ns: rng.chance(1, 2).then_some(MS),
                    },
                    2 => Params::RoundRobin {
                        quantum_ns: rng.range(MS / 10, 2 * MS),
                    },
                    _ => Params::BestEffort {
                        nice: rng.range(0, 39) as i8 - 20,
                    },
                };
                // EDF may refuse (over the bound): then it is not added.
                let _ = p.add(TaskId(i), params, 0);
            }
            let mut now = 0;
            for _ in 0..2_000 {
                let d = p.pick(now);
                if let Some(t) = d.task {
                    assert_eq!(p.runnable(t), Some(true), "case {case}");
                    if d.until.is_some_and(|u| u <= now) {
                        panic!("case {case}: until {:?} at {now}", d.until);
                    }
                    if p.top().params(t).is_none() {
                        assert_eq!(p.top_mut().pick(now).task, None, "case {case}");
                        if p.bottom().bottom().params(t).is_some() {
                            assert_eq!(p.bottom_mut().top_mut().pick(now).task, None);
                        }
                    }
                } else {
                    assert_eq!(p.top_mut().pick(now).task, None);
                    assert_eq!(p.bottom_mut().pick(now).task, None);
                }
                let i = TaskId(rng.range(0, u64::from(n) - 1) as u32);
                if p.params(i).is_none() {
                    continue;
                }
                match rng.range(0, 5) {
                    0 => p.wake(i, now).unwrap(),
                    1 => p.block(i, now).unwrap(),
                    2 => p.yield_now(i, now).unwrap(),
                    _ => {
                        let next = match d.until {
                            Some(u) if rng.chance(3, 4) => u + rng.range(0, MS / 10),
                            _ => now + rng.range(1, 3 * MS),
                        };
                        if let Some(t) = d.task {
                            p.charge(t, next - now, next).unwrap();
                        }
                        now = next;
                    }
                }
            }
        }
    }

    #[test]
    fn routes_events_and_moves_tasks_between_sides() {
        let mut p = Standard::standard(PPB, 4 * MS);
        let x = TaskId(7);
        p.add(x, Params::BestEffort { nice: 0 }, 0).unwrap();
        assert!(p.bottom().bottom().params(x).is_some());
        assert_eq!(
            p.add(x, Params::BestEffort { nice: 0 }, 0),
            Err(AdmitError::Duplicate(x))
        );
        let dl = Params::Edf {
            period_ns: 10 * MS,
            budget_ns: 2 * MS,
            deadline_ns: 10 * MS,
        };
        p.change(x, dl, 1).unwrap();
        assert!(p.top().params(x).is_some());
        assert!(p.bottom().bottom().params(x).is_none());
        p.change(
            x,
            Params::Fixed {
                prio: 9,
                quantum_ns: None,
            },
            2,
        )
        .unwrap();
        assert!(p.bottom().top().params(x).is_some());
        p.block(x, 3).unwrap();
        assert_eq!(p.runnable(x), Some(false));
        assert_eq!(p.pick(3), Dispatch::idle(None));
        p.wake(x, 4).unwrap();
        assert_eq!(p.pick(4).task, Some(x));
        p.remove(x, 5).unwrap();
        assert_eq!(p.wake(x, 6), Err(UnknownTask(x)));
        assert_eq!(p.params(x), None);
        assert!(p.take_misses().is_empty());
    }
}

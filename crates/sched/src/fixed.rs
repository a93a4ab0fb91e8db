//! Fixed priority, preemptive, as POSIX SCHED_FIFO and SCHED_RR (what a
//! guest's `sched_setscheduler(SCHED_FIFO|SCHED_RR)` becomes, seeds/001
//! section 2.2).
//!
//! Decides: the runnable task of the highest level (`prio`, larger is
//! more important, `PRIO_MIN..=PRIO_MAX`) runs; within a level, the head
//! of the level's FIFO queue. A task that wakes joins the tail of its
//! level; a preempted task stays at the head of its level (POSIX: a
//! preempted SCHED_FIFO thread is the head of its list); `yield_now`
//! sends it to the tail. A level's task with a quantum
//! ([`Params::Fixed`]`{ quantum_ns: Some(_) }`, SCHED_RR) goes to the tail
//! when its quantum is used up (deficit accounting as round robin); a
//! task without one (SCHED_FIFO) runs until it blocks, yields or a more
//! important task becomes runnable.
//!
//! Invariants:
//! * `pick` never returns a task while a task of a higher level is
//!   runnable.
//! * `until` is the end of the picked task's quantum, or `None` for FIFO:
//!   only an event (wake, block, yield, add) changes the decision, and the
//!   executive calls `pick` after each event.

use super::{AdmitError, Dispatch, Params, Policy, Slice, TaskId, UnknownTask};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Clone)]
struct Entry {
    prio: u8,
    quantum_ns: Option<u64>,
    slice: Option<Slice>,
    runnable: bool,
}

/// Fixed-priority scheduling; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct FixedPriority {
    tasks: BTreeMap<TaskId, Entry>,
    /// Runnable tasks per level, head first.
    levels: BTreeMap<u8, VecDeque<TaskId>>,
}

impl FixedPriority {
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&mut self, task: TaskId) -> Result<&mut Entry, UnknownTask> {
        self.tasks.get_mut(&task).ok_or(UnknownTask(task))
    }

    fn enqueue(&mut self, prio: u8, task: TaskId) {
        self.levels.entry(prio).or_default().push_back(task);
    }

    fn dequeue(&mut self, prio: u8, task: TaskId) {
        if let Some(q) = self.levels.get_mut(&prio) {
            q.retain(|&t| t != task);
            if q.is_empty() {
                self.levels.remove(&prio);
            }
        }
    }

    fn move_to_tail(&mut self, prio: u8, task: TaskId) {
        self.dequeue(prio, task);
        self.enqueue(prio, task);
    }

    /// The highest level with a runnable task.
    pub fn top_level(&self) -> Option<u8> {
        self.levels.keys().next_back().copied()
    }
}

impl Policy for FixedPriority {
    fn name(&self) -> &'static str {
        "fixed-priority"
    }

    fn accepts(&self, params: &Params) -> bool {
        matches!(params, Params::Fixed { .. })
    }

    fn add(&mut self, task: TaskId, params: Params, _now: u64) -> Result<(), AdmitError> {
        let Params::Fixed { prio, quantum_ns } = params else {
            return Err(AdmitError::Unsupported {
                policy: self.name(),
                kind: params.kind(),
            });
        };
        params.check()?;
        if self.tasks.contains_key(&task) {
            return Err(AdmitError::Duplicate(task));
        }
        self.tasks.insert(
            task,
            Entry {
                prio,
                quantum_ns,
                slice: quantum_ns.map(Slice::new),
                runnable: true,
            },
        );
        self.enqueue(prio, task);
        Ok(())
    }

    fn remove(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.tasks.remove(&task).ok_or(UnknownTask(task))?;
        self.dequeue(e.prio, task);
        Ok(())
    }

    fn wake(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        if !e.runnable {
            e.runnable = true;
            let prio = e.prio;
            self.enqueue(prio, task);
        }
        Ok(())
    }

    fn block(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        if e.runnable {
            e.runnable = false;
            let prio = e.prio;
            self.dequeue(prio, task);
        }
        Ok(())
    }

    fn yield_now(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        if let Some(s) = &mut e.slice {
            s.refill();
        }
        let (prio, runnable) = (e.prio, e.runnable);
        if runnable {
            self.move_to_tail(prio, task);
        }
        Ok(())
    }

    fn charge(&mut self, task: TaskId, ran_ns: u64, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        let expired = e.slice.as_mut().is_some_and(|s| s.charge(ran_ns));
        let (prio, runnable) = (e.prio, e.runnable);
        if expired && runnable {
            self.move_to_tail(prio, task);
        }
        Ok(())
    }

    fn pick(&mut self, now: u64) -> Dispatch {
        let Some(&task) = self.levels.values().next_back().and_then(|q| q.front()) else {
            return Dispatch::idle(None);
        };
        let until = self.tasks[&task]
            .slice
            .map(|s| now.saturating_add(s.left()));
        Dispatch {
            task: Some(task),
            until,
        }
    }

    fn params(&self, task: TaskId) -> Option<Params> {
        self.tasks.get(&task).map(|e| Params::Fixed {
            prio: e.prio,
            quantum_ns: e.quantum_ns,
        })
    }

    fn runnable(&self, task: TaskId) -> Option<bool> {
        self.tasks.get(&task).map(|e| e.runnable)
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{Load, Rng, Sim};
    use super::*;

    const MS: u64 = 1_000_000;

    fn fifo(prio: u8) -> Params {
        Params::Fixed {
            prio,
            quantum_ns: None,
        }
    }

    #[test]
    fn never_runs_a_lower_task_while_a_higher_one_is_runnable() {
        // Property over random traces: random priorities (FIFO and RR),
        // random wakes, blocks, yields and runs; after every event the
        // decision is checked against the model's set of runnable tasks.
        let mut rng = Rng::new(42);
        for _case in 0..200 {
            let mut p = FixedPriority::new();
            let n = rng.range(1, 8) as u32;
            let mut prio = Vec::new();
            let mut runnable = Vec::new();
            for i in 0..n {
                let pr = rng.range(1, 6) as u8 * 16 + 3; // few levels, shared
                let quantum_ns = rng.chance(1, 2).then(|| rng.range(1, 5 * MS));
                p.add(
                    TaskId(i),
                    Params::Fixed {
                        prio: pr,
                        quantum_ns,
                    },
                    0,
                )
                .unwrap();
                prio.push(pr);
                runnable.push(true);
            }
            let mut now = 0;
            for _step in 0..300 {
                let d = p.pick(now);
                let best = (0..n as usize)
                    .filter(|&i| runnable[i])
                    .map(|i| prio[i])
                    .max();
                match (d.task, best) {
                    (None, None) => {}
                    (Some(t), Some(b)) => {
                        assert!(runnable[t.0 as usize], "picked a blocked task");
                        assert_eq!(prio[t.0 as usize], b, "picked below the top level");
                        if let Some(u) = d.until {
                            assert!(u > now);
                        }
                    }
                    other => panic!("decision {other:?}"),
                }
                let i = rng.range(0, n as u64 - 1) as u32;
                match rng.range(0, 4) {
                    0 => {
                        p.wake(TaskId(i), now).unwrap();
                        runnable[i as usize] = true;
                    }
                    1 => {
                        p.block(TaskId(i), now).unwrap();
                        runnable[i as usize] = false;
                    }
                    2 => p.yield_now(TaskId(i), now).unwrap(),
                    _ => {
                        if let Some(t) = d.task {
                            let ran = rng.range(1, 3 * MS);
                            now += ran;
                            p.charge(t, ran, now).unwrap();
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fifo_within_a_level_and_preemption_keeps_the_head() {
        let mut p = FixedPriority::new();
        let (a, b, hi) = (TaskId(1), TaskId(2), TaskId(3));
        p.add(a, fifo(10), 0).unwrap();
        p.add(b, fifo(10), 0).unwrap();
        assert_eq!(
            p.pick(0),
            Dispatch {
                task: Some(a),
                until: None
            }
        );
        p.charge(a, 50 * MS, 50 * MS).unwrap();
        assert_eq!(p.pick(50 * MS).task, Some(a), "FIFO has no quantum");
        p.add(hi, fifo(11), 50 * MS).unwrap();
        assert_eq!(p.pick(50 * MS).task, Some(hi));
        p.block(hi, 51 * MS).unwrap();
        assert_eq!(
            p.pick(51 * MS).task,
            Some(a),
            "preempted task keeps the head"
        );
        p.yield_now(a, 52 * MS).unwrap();
        assert_eq!(p.pick(52 * MS).task, Some(b));
        p.block(b, 53 * MS).unwrap();
        p.wake(b, 54 * MS).unwrap();
        assert_eq!(p.pick(54 * MS).task, Some(a), "a woken task joins the tail");
        assert_eq!(p.top_level(), Some(10));
        p.remove(a, 55 * MS).unwrap();
        p.remove(b, 55 * MS).unwrap();
        assert_eq!(p.top_level(), None);
        assert_eq!(p.pick(55 * MS), Dispatch::idle(None));
    }

    #[test]
    fn rr_levels_rotate_on_quantum_and_share() {
        let mut sim = Sim::new(FixedPriority::new());
        let rr = |prio| Params::Fixed {
            prio,
            quantum_ns: Some(2 * MS),
        };
        for t in [TaskId(1), TaskId(2)] {
            sim.policy.add(t, rr(20), 0).unwrap();
            sim.task(t, Load::Spin);
        }
        sim.policy.add(TaskId(3), rr(5), 0).unwrap();
        sim.task(TaskId(3), Load::Spin);
        sim.run(1_000 * MS);
        assert_eq!(sim.received(TaskId(1), 0, sim.now), 500 * MS);
        assert_eq!(sim.received(TaskId(2), 0, sim.now), 500 * MS);
        assert_eq!(
            sim.received(TaskId(3), 0, sim.now),
            0,
            "starved, as SCHED_RR"
        );
    }

    #[test]
    fn a_higher_periodic_task_preempts_and_is_served_at_once() {
        let mut sim = Sim::new(FixedPriority::new());
        sim.policy.add(TaskId(1), fifo(1), 0).unwrap();
        sim.task(TaskId(1), Load::Spin);
        sim.policy.add(TaskId(2), fifo(50), 0).unwrap();
        sim.task(
            TaskId(2),
            Load::Periodic {
                period_ns: 10 * MS,
                work_ns: 3 * MS,
                phase_ns: MS,
            },
        );
        sim.run(1_000 * MS);
        let jobs: Vec<_> = sim.jobs.iter().filter(|j| j.task == TaskId(2)).collect();
        assert_eq!(jobs.len(), 100);
        assert!(jobs.iter().all(|j| j.finish - j.arrival == 3 * MS));
        assert_eq!(sim.received(TaskId(1), 0, sim.now), 700 * MS);
    }

    #[test]
    fn refuses_what_it_cannot_schedule() {
        let mut p = FixedPriority::new();
        let x = TaskId(1);
        assert!(matches!(
            p.add(x, Params::RoundRobin { quantum_ns: 1 }, 0),
            Err(AdmitError::Unsupported { .. })
        ));
        assert!(matches!(p.add(x, fifo(0), 0), Err(AdmitError::Invalid(_))));
        assert!(matches!(
            p.add(x, fifo(100), 0),
            Err(AdmitError::Invalid(_))
        ));
        p.add(x, fifo(99), 0).unwrap();
        assert_eq!(p.add(x, fifo(1), 0), Err(AdmitError::Duplicate(x)));
        let y = TaskId(2);
        for r in [
            p.wake(y, 0),
            p.block(y, 0),
            p.yield_now(y, 0),
            p.charge(y, 1, 1),
            p.remove(y, 1),
        ] {
            assert_eq!(r, Err(UnknownTask(y)));
        }
        // A guest's sched_setparam: same task, new level.
        p.change(x, fifo(3), 2).unwrap();
        assert_eq!(p.params(x), Some(fifo(3)));
        assert_eq!(p.top_level(), Some(3));
    }
}

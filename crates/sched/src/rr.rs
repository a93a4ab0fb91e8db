//! Round robin with a quantum (the policy the paper's executive uses for
//! its background guests in Figure 5, seeds/001 section 3.2).
//!
//! Decides: the task at the head of the run queue runs for what is left
//! of its quantum; when the quantum is used up the task goes to the tail
//! with a fresh one. A task that wakes joins the tail; a task that blocks
//! leaves the queue and keeps what is left of its quantum; `yield_now`
//! sends the caller to the tail with a fresh quantum.
//!
//! Tasks: [`Params::RoundRobin`] with their own quantum, and
//! [`Params::BestEffort`] whose quantum is the policy's base quantum
//! scaled by the nice value's Linux load weight ([`nice_weight`]`/1024`),
//! so best-effort tasks share the CPU in proportion to their weights.
//!
//! Invariants:
//! * Over any stretch where a set of tasks stays runnable, each receives
//!   its quantum per round: shares are proportional to quanta.
//! * Deficit accounting: when the executive lets a task run past its
//!   quantum (dispatch is late), the excess (up to one quantum) is taken
//!   from that task's next quantum, so lateness does not skew shares.
//!   Debt beyond one quantum is forgiven: every task in the queue gets at
//!   least 1 ns per round, so none is starved by its own debt.
//! * `pick` returns the head of the queue, `until = now + left > now`.

use super::MAX_TIME_NS;
use super::{nice_weight, AdmitError, Dispatch, Params, Policy, Slice, TaskId, UnknownTask};
use std::collections::{BTreeMap, VecDeque};

#[derive(Debug, Clone)]
struct Entry {
    params: Params,
    slice: Slice,
    runnable: bool,
}

/// Round robin; see the module documentation.
#[derive(Debug, Clone)]
pub struct RoundRobin {
    base_quantum_ns: u64,
    tasks: BTreeMap<TaskId, Entry>,
    queue: VecDeque<TaskId>,
}

impl RoundRobin {
    /// `base_quantum_ns`: the quantum of a best-effort task at nice 0
    /// (clamped to `1..=MAX_TIME_NS`).
    pub fn new(base_quantum_ns: u64) -> Self {
        RoundRobin {
            base_quantum_ns: base_quantum_ns.clamp(1, MAX_TIME_NS),
            tasks: BTreeMap::new(),
            queue: VecDeque::new(),
        }
    }

    /// The quantum a task with these parameters gets.
    fn quantum(&self, params: &Params) -> u64 {
        match *params {
            Params::RoundRobin { quantum_ns } => quantum_ns,
            Params::BestEffort { nice } => {
                let q = u128::from(self.base_quantum_ns) * u128::from(nice_weight(nice)) / 1024;
                (q as u64).clamp(1, MAX_TIME_NS)
            }
            _ => 0,
        }
    }

    fn entry(&mut self, task: TaskId) -> Result<&mut Entry, UnknownTask> {
        self.tasks.get_mut(&task).ok_or(UnknownTask(task))
    }

    fn dequeue(&mut self, task: TaskId) {
        self.queue.retain(|&t| t != task);
    }

    /// Tasks in queue order (head first), for status displays.
    pub fn queue(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.queue.iter().copied()
    }
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn accepts(&self, params: &Params) -> bool {
        matches!(
            params,
            Params::RoundRobin { .. } | Params::BestEffort { .. }
        )
    }

    fn add(&mut self, task: TaskId, params: Params, _now: u64) -> Result<(), AdmitError> {
        if !self.accepts(&params) {
            return Err(AdmitError::Unsupported {
                policy: self.name(),
                kind: params.kind(),
            });
        }
        params.check()?;
        if self.tasks.contains_key(&task) {
            return Err(AdmitError::Duplicate(task));
        }
        let slice = Slice::new(self.quantum(&params));
        self.tasks.insert(
            task,
            Entry {
                params,
                slice,
                runnable: true,
            },
        );
        self.queue.push_back(task);
        Ok(())
    }

    fn remove(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        self.tasks.remove(&task).ok_or(UnknownTask(task))?;
        self.dequeue(task);
        Ok(())
    }

    fn wake(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        if !e.runnable {
            e.runnable = true;
            self.queue.push_back(task);
        }
        Ok(())
    }

    fn block(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        if e.runnable {
            e.runnable = false;
            self.dequeue(task);
        }
        Ok(())
    }

    fn yield_now(&mut self, task: TaskId, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        e.slice.refill();
        if e.runnable {
            self.dequeue(task);
            self.queue.push_back(task);
        }
        Ok(())
    }

    fn charge(&mut self, task: TaskId, ran_ns: u64, _now: u64) -> Result<(), UnknownTask> {
        let e = self.entry(task)?;
        // Quantum used up: a fresh one minus the debt, and the tail.
        if e.slice.charge(ran_ns) && e.runnable {
            self.dequeue(task);
            self.queue.push_back(task);
        }
        Ok(())
    }

    fn pick(&mut self, now: u64) -> Dispatch {
        match self.queue.front() {
            Some(&task) => Dispatch {
                task: Some(task),
                until: Some(now.saturating_add(self.tasks[&task].slice.left())),
            },
            None => Dispatch::idle(None),
        }
    }

    fn params(&self, task: TaskId) -> Option<Params> {
        self.tasks.get(&task).map(|e| e.params)
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
    const S: u64 = 1_000_000_000;

    fn rr(q: u64) -> Params {
        Params::RoundRobin { quantum_ns: q }
    }

    /// Asserts `got` is within 1% of `want`.
    fn within_1pct(got: u64, want: u64, what: &str) {
        let diff = got.abs_diff(want);
        assert!(diff * 100 <= want, "{what}: got {got}, want {want} (±1%)");
    }

    #[test]
    fn two_spinners_share_within_1pct_over_2s() {
        let mut sim = Sim::new(RoundRobin::new(10 * MS));
        for t in [TaskId(1), TaskId(2)] {
            sim.policy.add(t, rr(10 * MS), 0).unwrap();
            sim.task(t, Load::Spin);
        }
        sim.run(2 * S);
        for t in [TaskId(1), TaskId(2)] {
            within_1pct(sim.received(t, 0, 2 * S), S, &format!("{t}"));
        }
        // And they alternate every quantum.
        assert!(sim.spans.windows(2).all(|w| w[0].task != w[1].task));
        assert!(sim.spans.iter().all(|s| s.end - s.start == 10 * MS));
    }

    #[test]
    fn shares_follow_quanta_even_when_dispatch_is_late() {
        // Property: for random quanta and a late executive (overshoot up
        // to 200 µs past every quantum end), each spinner's share of 2 s
        // is its quantum's share of the sum, within one round's
        // granularity (the largest quantum plus one overshoot: the run
        // ends mid-round) — and the lateness does not accumulate.
        let mut rng = Rng::new(0x5eed);
        for case in 0..60 {
            let n = rng.range(2, 5) as u32;
            let mut sim = Sim::new(RoundRobin::new(10 * MS));
            sim.overshoot = Some((Rng::new(case), 200_000));
            let quanta: Vec<u64> = (0..n).map(|_| rng.range(MS, 20 * MS)).collect();
            for (i, &q) in quanta.iter().enumerate() {
                let t = TaskId(i as u32);
                sim.policy.add(t, rr(q), 0).unwrap();
                sim.task(t, Load::Spin);
            }
            sim.run(2 * S);
            let total: u64 = quanta.iter().sum();
            let elapsed = sim.now;
            for (i, &q) in quanta.iter().enumerate() {
                let want = (elapsed as u128 * q as u128 / total as u128) as u64;
                let got = sim.received(TaskId(i as u32), 0, elapsed);
                let slack = quanta.iter().max().unwrap() + 200_000;
                assert!(
                    got.abs_diff(want) <= slack,
                    "case {case} task {i} quanta {quanta:?}: got {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn best_effort_shares_follow_nice_weights() {
        let mut sim = Sim::new(RoundRobin::new(4 * MS));
        let nices = [0i8, 5, -3];
        for (i, &nice) in nices.iter().enumerate() {
            let t = TaskId(i as u32);
            sim.policy.add(t, Params::BestEffort { nice }, 0).unwrap();
            sim.task(t, Load::Spin);
        }
        sim.run(4 * S);
        let weights: Vec<u64> = nices.iter().map(|&n| u64::from(nice_weight(n))).collect();
        let total: u64 = weights.iter().sum();
        for (i, w) in weights.iter().enumerate() {
            let want = sim.now * w / total;
            within_1pct(
                sim.received(TaskId(i as u32), 0, sim.now),
                want,
                "nice share",
            );
        }
    }

    #[test]
    fn sleeper_is_served_within_one_round() {
        // A task that wakes joins the tail: it waits at most one round of
        // the others' quanta.
        let mut sim = Sim::new(RoundRobin::new(10 * MS));
        for t in [TaskId(1), TaskId(2)] {
            sim.policy.add(t, rr(5 * MS), 0).unwrap();
            sim.task(t, Load::Spin);
        }
        sim.policy.add(TaskId(3), rr(5 * MS), 0).unwrap();
        sim.task(
            TaskId(3),
            Load::Sleepy {
                work_ns: MS,
                sleep_ns: 7 * MS,
            },
        );
        sim.run(S);
        let jobs: Vec<_> = sim.jobs.iter().filter(|j| j.task == TaskId(3)).collect();
        assert!(jobs.len() > 50, "{} jobs", jobs.len());
        for j in jobs {
            assert!(j.finish - j.arrival <= 11 * MS, "{j:?}");
        }
    }

    #[test]
    fn events_move_tasks_in_the_queue() {
        let mut p = RoundRobin::new(MS);
        let (a, b, c) = (TaskId(1), TaskId(2), TaskId(3));
        for t in [a, b, c] {
            p.add(t, rr(10), 0).unwrap();
        }
        assert_eq!(
            p.pick(0),
            Dispatch {
                task: Some(a),
                until: Some(10)
            }
        );
        p.charge(a, 4, 4).unwrap();
        assert_eq!(
            p.pick(4),
            Dispatch {
                task: Some(a),
                until: Some(10)
            }
        );
        p.yield_now(a, 4).unwrap();
        assert_eq!(p.queue().collect::<Vec<_>>(), [b, c, a]);
        p.block(b, 5).unwrap();
        p.block(b, 5).unwrap();
        assert_eq!(p.runnable(b), Some(false));
        assert_eq!(p.pick(5).task, Some(c));
        p.wake(b, 6).unwrap();
        p.wake(b, 6).unwrap();
        assert_eq!(p.queue().collect::<Vec<_>>(), [c, a, b]);
        p.charge(c, 10, 16).unwrap();
        assert_eq!(p.queue().collect::<Vec<_>>(), [a, b, c]);
        // A blocked task charged to the end of its quantum refills without
        // joining the queue.
        p.block(a, 16).unwrap();
        p.charge(a, 50, 16).unwrap();
        assert_eq!(p.queue().collect::<Vec<_>>(), [b, c]);
        p.remove(b, 17).unwrap();
        p.remove(c, 17).unwrap();
        assert_eq!(p.pick(17), Dispatch::idle(None));
        p.wake(a, 18).unwrap();
        // Debt beyond one quantum is forgiven: at least 1 ns.
        assert_eq!(
            p.pick(18),
            Dispatch {
                task: Some(a),
                until: Some(19)
            }
        );
    }

    #[test]
    fn refuses_what_it_cannot_schedule() {
        let mut p = RoundRobin::new(MS);
        let x = TaskId(9);
        assert_eq!(p.wake(x, 0), Err(UnknownTask(x)));
        assert_eq!(p.block(x, 0), Err(UnknownTask(x)));
        assert_eq!(p.charge(x, 1, 0), Err(UnknownTask(x)));
        assert_eq!(p.yield_now(x, 0), Err(UnknownTask(x)));
        assert_eq!(p.remove(x, 0), Err(UnknownTask(x)));
        assert_eq!(p.params(x), None);
        assert_eq!(p.runnable(x), None);
        assert_eq!(
            p.add(x, rr(0), 0),
            Err(AdmitError::Invalid(super::super::ParamError::ZeroQuantum))
        );
        assert!(matches!(
            p.add(
                x,
                Params::Fixed {
                    prio: 1,
                    quantum_ns: None
                },
                0
            ),
            Err(AdmitError::Unsupported { .. })
        ));
        p.add(x, rr(5), 0).unwrap();
        assert_eq!(p.add(x, rr(5), 0), Err(AdmitError::Duplicate(x)));
        // Huge charges saturate.
        p.charge(x, u64::MAX, u64::MAX).unwrap();
        assert_eq!(p.pick(u64::MAX).task, Some(x));
    }

    #[test]
    fn change_keeps_runnable_state() {
        let mut p = RoundRobin::new(MS);
        let x = TaskId(1);
        p.add(x, rr(5), 0).unwrap();
        p.block(x, 0).unwrap();
        p.change(x, Params::BestEffort { nice: 3 }, 1).unwrap();
        assert_eq!(p.params(x), Some(Params::BestEffort { nice: 3 }));
        assert_eq!(p.runnable(x), Some(false));
        assert!(p.change(x, rr(0), 2).is_err());
        assert_eq!(p.params(x), Some(Params::BestEffort { nice: 3 }));
        assert!(matches!(
            p.change(
                x,
                Params::Fixed {
                    prio: 3,
                    quantum_ns: None
                },
                2
            ),
            Err(super::super::ChangeError::Refused(
                AdmitError::Unsupported { .. }
            ))
        ));
        assert_eq!(p.params(x), Some(Params::BestEffort { nice: 3 }));
        assert_eq!(p.runnable(x), Some(false));
    }
}

//! Test support: a deterministic PRNG and a tiny discrete-event simulator
//! that plays the executive's part (wake, pick, run, charge, block) over
//! synthetic tasks and records what ran when, so that tests check the
//! policies' decisions on traces independently of the policies' own
//! bookkeeping.

use super::{Policy, TaskId};
use std::collections::VecDeque;

/// splitmix64: small, deterministic, good enough for parameter sweeps.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
}

/// What a simulated task does.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    /// Always runnable (CPU-bound).
    Spin,
    /// A job of `work_ns` arrives every `period_ns` from `phase_ns`: the
    /// task is runnable while it has unfinished work, blocked otherwise.
    Periodic {
        period_ns: u64,
        work_ns: u64,
        phase_ns: u64,
    },
    /// Needs `work_ns` of CPU, then sleeps `sleep_ns`, and again.
    Sleepy { work_ns: u64, sleep_ns: u64 },
}

/// `task` ran over `[start, end)`.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub task: TaskId,
    pub start: u64,
    pub end: u64,
}

/// A finished job of a `Periodic` or `Sleepy` task.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub task: TaskId,
    pub arrival: u64,
    pub finish: u64,
}

struct Task {
    id: TaskId,
    load: Load,
    /// Unfinished jobs: (arrival, remaining work).
    jobs: VecDeque<(u64, u64)>,
    next_arrival: Option<u64>,
    runnable: bool,
}

pub struct Sim<P: Policy> {
    pub policy: P,
    pub now: u64,
    tasks: Vec<Task>,
    pub spans: Vec<Span>,
    pub jobs: Vec<Job>,
    /// The executive is late: each run that ends at the policy's `until`
    /// overshoots by a random `0..=max` ns.
    pub overshoot: Option<(Rng, u64)>,
}

impl<P: Policy> Sim<P> {
    pub fn new(policy: P) -> Self {
        Sim {
            policy,
            now: 0,
            tasks: Vec::new(),
            spans: Vec::new(),
            jobs: Vec::new(),
            overshoot: None,
        }
    }

    /// Adds a task to the simulation only (the test admits it itself).
    pub fn task(&mut self, id: TaskId, load: Load) {
        let (next_arrival, runnable) = match load {
            Load::Spin => (None, true),
            Load::Periodic { phase_ns, .. } => (Some(self.now + phase_ns), false),
            Load::Sleepy { work_ns, .. } => {
                let mut t = VecDeque::new();
                t.push_back((self.now, work_ns));
                self.tasks.push(Task {
                    id,
                    load,
                    jobs: t,
                    next_arrival: None,
                    runnable: true,
                });
                return;
            }
        };
        if !runnable {
            self.policy.block(id, self.now).expect("block a new task");
        }
        self.tasks.push(Task {
            id,
            load,
            jobs: VecDeque::new(),
            next_arrival,
            runnable,
        });
    }

    fn arrivals(&mut self) {
        for t in &mut self.tasks {
            while let Some(a) = t.next_arrival.filter(|&a| a <= self.now) {
                let work = match t.load {
                    Load::Periodic {
                        period_ns, work_ns, ..
                    } => {
                        t.next_arrival = Some(a + period_ns);
                        work_ns
                    }
                    Load::Sleepy { work_ns, .. } => {
                        t.next_arrival = None;
                        work_ns
                    }
                    Load::Spin => unreachable!("spinning tasks have no arrivals"),
                };
                t.jobs.push_back((a, work));
                if !t.runnable {
                    t.runnable = true;
                    self.policy.wake(t.id, self.now).expect("wake");
                }
            }
        }
    }

    /// Runs the simulation until `end`.
    pub fn run(&mut self, end: u64) {
        let mut steps = 0u64;
        while self.now < end {
            steps += 1;
            assert!(steps < 50_000_000, "simulation does not progress");
            self.arrivals();
            let d = self.policy.pick(self.now);
            let next_arrival = self.tasks.iter().filter_map(|t| t.next_arrival).min();
            let mut stop = super::earliest(d.until, next_arrival)
                .unwrap_or(end)
                .min(end);
            let Some(id) = d.task else {
                assert!(stop > self.now, "idle until {stop} at {}", self.now);
                self.now = stop;
                continue;
            };
            let i = self
                .tasks
                .iter()
                .position(|t| t.id == id)
                .expect("picked a task the simulation knows");
            assert!(
                self.tasks[i].runnable,
                "picked blocked {id} at {}",
                self.now
            );
            if Some(stop) == d.until {
                if let Some((rng, max)) = &mut self.overshoot {
                    stop += rng.range(0, *max);
                }
            }
            let t = &mut self.tasks[i];
            if let Some(&(_, left)) = t.jobs.front() {
                stop = stop.min(self.now + left);
            }
            assert!(
                stop > self.now,
                "{id} picked to run until {stop} at {}",
                self.now
            );
            let ran = stop - self.now;
            self.spans.push(Span {
                task: id,
                start: self.now,
                end: stop,
            });
            self.now = stop;
            self.policy.charge(id, ran, stop).expect("charge");
            let t = &mut self.tasks[i];
            if let Some(front) = t.jobs.front_mut() {
                front.1 -= ran;
                if front.1 == 0 {
                    let (arrival, _) = t.jobs.pop_front().unwrap();
                    self.jobs.push(Job {
                        task: id,
                        arrival,
                        finish: stop,
                    });
                    if let Load::Sleepy { sleep_ns, .. } = t.load {
                        t.next_arrival = Some(stop + sleep_ns);
                    }
                    if t.jobs.is_empty() {
                        t.runnable = false;
                        self.policy.block(id, stop).expect("block");
                    }
                }
            }
        }
    }

    /// CPU time `task` received in `[from, to)`.
    pub fn received(&self, task: TaskId, from: u64, to: u64) -> u64 {
        self.spans
            .iter()
            .filter(|s| s.task == task)
            .map(|s| s.end.min(to).saturating_sub(s.start.max(from)))
            .sum()
    }
}

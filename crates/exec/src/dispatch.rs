//! Dispatch: the executive decides which guest runs (issue 11; Hijack,
//! seeds/001 section 2.1: "guests execute only when scheduled by the
//! executive").
//!
//! Mechanism, chosen by measurement (bench/dispatch): every guest lives in
//! a cgroup v2 of its own below the executive's (`g0`, `g1`, ...; the
//! guest joins it before it execs, launch::Placement) and the guests not
//! dispatched are **frozen** (`cgroup.freeze`). Of the candidates the issue
//! names, raising the dispatched guest to SCHED_FIFO 1 over SCHED_IDLE
//! guests was the fastest switch (8.3 µs median on one CPU), but a
//! CPU-bound real-time guest starves the host's normal tasks and the
//! kernel's fair server (6.12+) then takes the CPU from every real-time
//! task, the executive included, for up to 50 ms per second (measured:
//! the executive's quantum-end wake-up 42 ms late at p99); nice -20 over
//! SCHED_IDLE took 34 µs and leaked; SIGSTOP/SIGCONT is as fast as
//! freezing (10-11 µs) but a guest's parent sees the stops (waitpid
//! WUNTRACED, a shell's job control). Freezing is invisible to the guests,
//! takes whole process trees, and leaves them at their normal policy.
//!
//! The policy is [`crate::sched::Standard`] (EDF over fixed priority over
//! round robin), one task per guest (a guest's threads share its turns by
//! the host's fair share). Events: the executive asks [`Dispatcher::tick`]
//! when the policy's `until` or the next state check is due, and
//! [`Dispatcher::poke`]s it when a guest's call is held or released; a
//! guest is blocked when none of its threads is runnable (read from
//! /proc/TID/stat of each tid in `cgroup.threads`: a thread waiting for
//! the executive's answer sleeps like one blocked in the kernel), checked
//! every `check` while it is dispatched; a blocked guest stays thawed
//! (it uses no CPU) so that its wake-up can be seen, and is frozen again
//! when it becomes runnable and is not picked.
//!
//! Several CPUs (`cpus = [0, 1]`): partitioned, each guest on one CPU
//! (its threads' affinity, set before it execs) with a policy of that
//! CPU's own ([`crate::sched::partition`]: reservations spread densest
//! first, each CPU admits by the uniprocessor test; the others balance the
//! count). So one guest runs per CPU at a time, never migrating.
//!
//! Invariants: at most one guest thawed and runnable per CPU at a time; a
//! guest that ended is never picked; the cgroups are removed when the
//! dispatcher is dropped (the reaper removes what is left after a crash).
//! Guest `i` is `TaskId(i)` in the policy of its CPU, and only there.
//!
//! Not yet: per-thread dispatch inside a guest; global (migrating)
//! multiprocessor scheduling; a guest's wake-up from a kernel block is
//! seen up to `check` late, and runs meanwhile.

use crate::sched::partition::{partition, PartitionError};
use crate::sched::{AdmitError, ChangeError, Params, Policy, Standard, TaskId, PPB};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How guests are dispatched.
#[derive(Clone, Debug)]
pub struct DispatchOptions {
    /// CPUs the guests share (the paper's virtual processor: one).
    pub cpus: Vec<usize>,
    /// Round robin quantum of best-effort guests.
    pub quantum: Duration,
    /// How often the dispatched guest's state is checked.
    pub check: Duration,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        DispatchOptions {
            cpus: vec![0],
            quantum: Duration::from_millis(10),
            check: Duration::from_millis(1),
        }
    }
}

/// What dispatching counted (for `exec status` and the benchmark).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DispatchStats {
    /// Decisions taken, and those that switched guests.
    pub decisions: u64,
    pub switches: u64,
    /// ns each guest was dispatched (thawed and runnable).
    pub ran_ns: Vec<u64>,
    /// EDF deadlines missed, per guest.
    pub misses: Vec<u64>,
    /// Quantum ends (and other policy deadlines) seen, and how late the
    /// executive acted on each (ns after the policy's `until`): the first
    /// [`LATENESS_KEPT`] kept, for percentiles.
    #[serde(skip)]
    pub lateness_ns: Vec<u64>,
    /// How long a switch took (the freeze and thaw writes), ns.
    #[serde(skip)]
    pub switch_ns: Vec<u64>,
}

/// Samples of lateness and switch time kept (8 bytes each, reserved at
/// start: no allocation while dispatching).
pub const LATENESS_KEPT: usize = 1 << 16;

struct Group {
    dir: PathBuf,
    procs: File,
    freeze: File,
    frozen: bool,
    /// Not runnable (every thread asleep), as last seen.
    blocked: bool,
    ended: bool,
}

/// One CPU of the system: its policy over its guests, and who runs.
struct Part {
    policy: Standard,
    current: Option<usize>,
    /// Since when `current` runs (ns since epoch).
    since: u64,
    /// The policy's next decision instant (ns since epoch).
    until: Option<u64>,
}

/// Why dispatching could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The guests' cgroups (root and cgroup v2 needed).
    #[error("make the guests' cgroups for dispatching (root and cgroup v2 needed)")]
    Cgroup(#[source] io::Error),
    /// The guests' reservations do not fit the CPUs.
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

/// The guests' cgroups and the policies over them.
pub struct Dispatcher {
    opts: DispatchOptions,
    groups: Vec<Group>,
    parts: Vec<Part>,
    /// Guest → its part (index into `opts.cpus` and `parts`).
    part_of: Vec<usize>,
    epoch: Instant,
    next_check: Option<u64>,
    pub stats: DispatchStats,
}

/// The cgroup v2 directory this process is in.
fn own_cgroup() -> io::Result<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("no cgroup v2 entry in /proc/self/cgroup"))?;
    let root =
        mantle_sys::probe::cgroup2_mount().ok_or_else(|| io::Error::other("no cgroup v2 mount"))?;
    Ok(root.join(rel.trim().trim_start_matches('/')))
}

/// Whether any thread of the cgroup at `dir` is runnable.
fn any_runnable(dir: &Path) -> bool {
    let Ok(tids) = std::fs::read_to_string(dir.join("cgroup.threads")) else {
        return false;
    };
    tids.lines().any(|t| {
        std::fs::read_to_string(format!("/proc/{}/stat", t.trim()))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('R'))
            })
            .unwrap_or(false)
    })
}

impl Dispatcher {
    /// Gives each guest (its parameters; None: best effort) a CPU of
    /// `opts.cpus` and makes one cgroup per guest below this process's own
    /// (root and cgroup v2 needed), thawed until [`Dispatcher::start`].
    pub fn new(
        opts: DispatchOptions,
        params: &[Option<Params>],
    ) -> Result<Dispatcher, DispatchError> {
        let guests = params.len();
        let ps: Vec<Params> = params
            .iter()
            .map(|p| p.unwrap_or(Params::BestEffort { nice: 0 }))
            .collect();
        let part_of = partition(&ps, opts.cpus.len(), PPB)?;
        let base = own_cgroup().map_err(DispatchError::Cgroup)?;
        let mut groups = Vec::with_capacity(guests);
        for i in 0..guests {
            let dir = base.join(format!("g{i}"));
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(DispatchError::Cgroup(e)),
            }
            let open = |f: &str| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join(f))
                    .map_err(DispatchError::Cgroup)
            };
            groups.push(Group {
                procs: open("cgroup.procs")?,
                freeze: open("cgroup.freeze")?,
                dir,
                frozen: false,
                blocked: false,
                ended: false,
            });
        }
        let parts = opts
            .cpus
            .iter()
            .map(|_| Part {
                policy: Standard::standard(PPB, opts.quantum.as_nanos() as u64),
                current: None,
                since: 0,
                until: None,
            })
            .collect();
        Ok(Dispatcher {
            stats: DispatchStats {
                ran_ns: vec![0; guests],
                misses: vec![0; guests],
                lateness_ns: Vec::with_capacity(LATENESS_KEPT),
                switch_ns: Vec::with_capacity(LATENESS_KEPT),
                ..Default::default()
            },
            parts,
            part_of,
            opts,
            groups,
            epoch: Instant::now(),
            next_check: None,
        })
    }

    /// Guest `i`'s `cgroup.procs`, for the child to join before it execs.
    pub fn procs_fd(&self, i: usize) -> Option<RawFd> {
        self.groups.get(i).map(|g| g.procs.as_raw_fd())
    }

    /// The CPUs guest `i` runs on (its part's one CPU).
    pub fn cpus_of(&self, i: usize) -> &[usize] {
        match self.part_of.get(i) {
            Some(&p) => std::slice::from_ref(&self.opts.cpus[p]),
            None => &[],
        }
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn set_frozen(&mut self, i: usize, frozen: bool) {
        let g = &mut self.groups[i];
        if g.frozen != frozen && !g.ended {
            // a failed write leaves the state as it was (the guest ended)
            if g.freeze.write_all(if frozen { b"1" } else { b"0" }).is_ok() {
                g.frozen = frozen;
            }
        }
    }

    /// Admits every guest with its parameters (None: best effort) and
    /// takes the first decision; every guest but the one picked is frozen.
    pub fn start(&mut self, params: &[Option<Params>]) -> Result<(), (usize, AdmitError)> {
        let now = self.ns(Instant::now());
        for (i, p) in params.iter().enumerate() {
            let p = p.unwrap_or(Params::BestEffort { nice: 0 });
            let part = self.part_of.get(i).copied().unwrap_or(0);
            self.parts[part]
                .policy
                .add(TaskId(i as u32), p, now)
                .map_err(|e| (i, e))?;
        }
        for i in 0..self.groups.len() {
            self.set_frozen(i, true);
        }
        self.decide(now);
        Ok(())
    }

    /// The next instant the executive must call [`Dispatcher::tick`].
    pub fn next_due(&self) -> Option<Instant> {
        let at = self
            .parts
            .iter()
            .filter_map(|p| p.until)
            .chain(self.next_check)
            .min();
        at.map(|ns| self.epoch + Duration::from_nanos(ns))
    }

    /// Something may have changed for guest `i` (a call of it was held or
    /// released): check at once.
    pub fn poke(&mut self, _i: usize) {
        self.next_check = Some(0);
    }

    /// Guest `i` ended: never picked again.
    pub fn exit(&mut self, i: usize) {
        let now = self.ns(Instant::now());
        if let Some(g) = self.groups.get_mut(i) {
            g.ended = true;
        }
        let Some(&p) = self.part_of.get(i) else {
            return;
        };
        self.account(now);
        let part = &mut self.parts[p];
        let _ = part.policy.remove(TaskId(i as u32), now);
        if part.current == Some(i) {
            part.current = None;
        }
        self.decide(now);
    }

    /// Guest `i` asks for new parameters (its sched_setscheduler and the
    /// like, mapped by crate::sched::guest).
    pub fn change(&mut self, i: usize, p: Params) -> Result<(), ChangeError> {
        let now = self.ns(Instant::now());
        self.account(now);
        let part = self.part_of.get(i).copied().unwrap_or(0);
        let r = self.parts[part].policy.change(TaskId(i as u32), p, now);
        self.decide(now);
        r
    }

    /// Guest `i` gives up the rest of its turn (its `sched_yield`): the
    /// policy's yield, then a new decision.
    pub fn yield_now(&mut self, i: usize) {
        let now = self.ns(Instant::now());
        self.account(now);
        if let Some(&p) = self.part_of.get(i) {
            let _ = self.parts[p].policy.yield_now(TaskId(i as u32), now);
        }
        self.decide(now);
    }

    /// The parameters guest `i` is scheduled with.
    pub fn params(&self, i: usize) -> Option<Params> {
        let p = self.part_of.get(i)?;
        self.parts[*p].policy.params(TaskId(i as u32))
    }

    /// The CPU guest `i` is dispatched on.
    pub fn cpu_of(&self, i: usize) -> Option<usize> {
        self.part_of.get(i).map(|&p| self.opts.cpus[p])
    }

    /// A summary of the dispatching: decisions, switches, and the lateness
    /// at quantum ends and switch times (median, p99, max, ns).
    pub fn summary(&self) -> String {
        fn q(xs: &[u64]) -> String {
            let mut v = xs.to_vec();
            v.sort_unstable();
            if v.is_empty() {
                return "none".into();
            }
            let at = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
            format!(
                "median {} p99 {} max {} ns (n={})",
                at(0.5),
                at(0.99),
                v[v.len() - 1],
                v.len()
            )
        }
        format!(
            "{} decisions, {} switches; lateness at quantum end: {}; switch: {}",
            self.stats.decisions,
            self.stats.switches,
            q(&self.stats.lateness_ns),
            q(&self.stats.switch_ns)
        )
    }

    /// Which guest is dispatched on each CPU (in `cpus` order).
    pub fn current(&self) -> Vec<Option<usize>> {
        self.parts.iter().map(|p| p.current).collect()
    }

    /// Decides when due (or when poked): charges the guest that ran,
    /// updates who is blocked, picks, and freezes and thaws accordingly.
    pub fn tick(&mut self) {
        let now_i = Instant::now();
        let now = self.ns(now_i);
        let due = self.next_due().is_some_and(|t| t <= now_i);
        if !due {
            return;
        }
        for p in &self.parts {
            if let Some(u) = p.until.filter(|&u| u <= now) {
                if self.stats.lateness_ns.len() < LATENESS_KEPT {
                    self.stats.lateness_ns.push(now - u);
                }
            }
        }
        self.account(now);
        self.decide(now);
    }

    fn account(&mut self, now: u64) {
        for part in &mut self.parts {
            if let Some(c) = part.current {
                let ran = now.saturating_sub(part.since);
                self.stats.ran_ns[c] += ran;
                let _ = part.policy.charge(TaskId(c as u32), ran, now);
            }
            part.since = now;
        }
        // who is runnable: the dispatched guest and the thawed blocked ones
        for i in 0..self.groups.len() {
            let g = &self.groups[i];
            if g.ended || (g.frozen && !g.blocked) {
                continue;
            }
            let runnable = any_runnable(&g.dir);
            let t = TaskId(i as u32);
            let policy = &mut self.parts[self.part_of[i]].policy;
            if runnable && self.groups[i].blocked {
                self.groups[i].blocked = false;
                let _ = policy.wake(t, now);
            } else if !runnable && !self.groups[i].blocked {
                self.groups[i].blocked = true;
                let _ = policy.block(t, now);
            }
        }
        for part in &mut self.parts {
            for m in part.policy.take_misses() {
                if let Some(x) = self.stats.misses.get_mut(m.task.0 as usize) {
                    *x += 1;
                }
            }
        }
    }

    fn decide(&mut self, now: u64) {
        for p in 0..self.parts.len() {
            self.decide_part(p, now);
        }
        // check the dispatched guests (they may block) and the thawed
        // blocked ones (they may wake)
        let watch = self.parts.iter().any(|p| p.current.is_some())
            || self.groups.iter().any(|g| g.blocked && !g.ended);
        self.next_check = watch.then(|| now + self.opts.check.as_nanos() as u64);
    }

    fn decide_part(&mut self, p: usize, now: u64) {
        let d = self.parts[p].policy.pick(now);
        self.stats.decisions += 1;
        let next = d.task.map(|t| t.0 as usize);
        let current = self.parts[p].current;
        if next != current {
            self.stats.switches += 1;
            let t0 = Instant::now();
            // the leaving guest: frozen, unless it is blocked (then it may
            // stay thawed: it uses no CPU, and its wake-up must be seen)
            if let Some(c) = current {
                if !self.groups[c].blocked {
                    self.set_frozen(c, true);
                }
            }
            if let Some(n) = next {
                self.set_frozen(n, false);
            }
            self.parts[p].current = next;
            if self.stats.switch_ns.len() < LATENESS_KEPT {
                self.stats.switch_ns.push(t0.elapsed().as_nanos() as u64);
            }
        }
        // this CPU's runnable guests that are thawed but not picked: frozen
        for i in 0..self.groups.len() {
            if self.part_of[i] == p && Some(i) != next && !self.groups[i].blocked {
                self.set_frozen(i, true);
            }
        }
        self.parts[p].since = now;
        self.parts[p].until = d.until;
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        for g in &self.groups {
            // thawed, so that whatever is left runs to its end
            let _ = (&g.freeze).write_all(b"0");
            let _ = std::fs::remove_dir(&g.dir);
        }
    }
}

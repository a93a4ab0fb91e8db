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
//! Freezing keeps guests off the CPU; host classes give the dispatched
//! one its CPU (issue 29, docs/exec-sched.md): a dispatched reservation
//! (EDF, fixed priority) runs at SCHED_RR `rt_priority` (below the
//! executive), bounded to `rt_share_ppb` of every `rt_window` of its CPU
//! (past it SCHED_OTHER until the window ends: real-time time that starves
//! the host's normal tasks makes the kernel's fair server preempt every
//! real-time task, the executive included); a dispatched best-effort guest
//! runs at SCHED_OTHER; a blocked guest left thawed (so that its wake-up
//! is seen: freezing would take a sleeping task out of its call) is
//! SCHED_IDLE, so that woken it takes no CPU from the dispatched one until
//! the next check freezes or picks it. (Thawed at SCHED_OTHER it ran by
//! fair share, undispatched: the leak issue 29 measured.)
//!
//! The policy is [`crate::sched::Standard`] (EDF over fixed priority over
//! round robin), one task per guest (a guest's threads share its turns by
//! the host's fair share). Events: the executive asks [`Dispatcher::tick`]
//! when the policy's `until` or the next state check is due, and
//! [`Dispatcher::poke`]s it when a guest's call is held or released; a
//! guest is blocked when none of its threads is runnable (read from
//! /proc/TID/stat of each tid in `cgroup.threads`: a thread waiting for
//! the executive's answer sleeps like one blocked in the kernel), checked
//! every `check` while it is dispatched; a blocked guest stays thawed,
//! at SCHED_IDLE, so that its wake-up can be seen, and is frozen again
//! when it becomes runnable and is not picked.
//!
//! Several CPUs (`cpus = [0, 1]`): partitioned, each guest on one CPU
//! (its threads' affinity, set before it execs) with a policy of that
//! CPU's own ([`crate::sched::partition`]: reservations spread densest
//! first, each CPU admits by the uniprocessor test; the others balance the
//! count). So one guest runs per CPU at a time, never migrating.
//!
//! Invariants: at most one task (guest, or thread) thawed and runnable per
//! CPU at a time; a task that ended is never picked; the cgroups are
//! removed when the dispatcher is dropped (the reaper removes what is left
//! after a crash). Task `k` is `TaskId(k)` in the policy of its guest's
//! CPU, and only there; per guest, task `i` is guest `i`.
//!
//! Per thread (`[dispatch] per = "thread"`): each thread of a guest is a
//! task of its own, in a threaded cgroup of its own below the guest's
//! (`gN/tTID`, frozen and thawed alone: the cgroup v2 freezer works on
//! threaded cgroups). A new thread starts in its creator's cgroup and is
//! moved to one of its own at the next check (until then it shares its
//! creator's turns); a thread's own sched_setscheduler and sched_yield
//! are its own, as on Linux. Per guest (the default) a guest's threads
//! share its turns by the host's fair share.
//!
//! Not yet: global (migrating) multiprocessor scheduling; a guest's
//! wake-up from a kernel block is seen up to `check` late, and runs
//! meanwhile only in its CPU's idle time (SCHED_IDLE).

use crate::sched::partition::{partition, PartitionError};
use crate::sched::{AdmitError, ChangeError, Params, Policy, Standard, TaskId, UnknownTask, PPB};
use mantle_sys::perf::CgroupCpuClock;
use mantle_sys::supervise::{set_class_of, HostClass};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the executive dispatches: whole guests, or each guest thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unit {
    /// A guest (its process tree) is one task.
    #[default]
    Guest,
    /// Every thread of every guest is a task.
    Thread,
}

/// How guests are dispatched.
#[derive(Clone, Debug)]
pub struct DispatchOptions {
    /// CPUs the guests share (the paper's virtual processor: one).
    pub cpus: Vec<usize>,
    /// Round robin quantum of best-effort guests.
    pub quantum: Duration,
    /// How often the dispatched guest's state is checked.
    pub check: Duration,
    /// Whole guests or threads.
    pub per: Unit,
    /// The host priority (SCHED_RR) a dispatched reservation (EDF or
    /// fixed priority) runs at: below the executive's, so that the
    /// executive always preempts it (lowered to the executive's priority
    /// minus one; 0: SCHED_OTHER, as when the executive is not real-time),
    /// and by default above every other real-time level (98): a
    /// reservation holds against the host's real-time tasks as
    /// SCHED_DEADLINE's would (which a guest pinned to one CPU cannot
    /// have: the kernel refuses SCHED_DEADLINE to a task whose affinity
    /// does not span its root domain), its time bounded by its budget and
    /// by `rt_share_ppb`. At 50 (the level of threaded interrupts and of
    /// most real-time programs), a reservation waited behind host tasks at
    /// 51-97 and behind equal ones for their whole round robin slice
    /// (100 ms): an `edf 2ms/10ms` guest got 0.067-0.125 of its CPU beside
    /// another program's SCHED_FIFO 60-67 threads on it.
    pub rt_priority: i32,
    /// Real-time time per CPU is bounded: at most `rt_share_ppb` of every
    /// `rt_window` is given at `rt_priority`; past it, the dispatched
    /// reservation runs on at SCHED_OTHER until the window ends, so that
    /// the host's normal tasks are never starved and the kernel's fair
    /// server (6.12+) never has to preempt every real-time task, the
    /// executive included (bench/dispatch).
    pub rt_window: Duration,
    pub rt_share_ppb: u64,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        DispatchOptions {
            cpus: vec![0],
            quantum: Duration::from_millis(10),
            check: Duration::from_millis(1),
            per: Unit::Guest,
            rt_priority: 98,
            rt_window: Duration::from_millis(100),
            rt_share_ppb: 900_000_000,
        }
    }
}

/// What dispatching counted (for `exec status` and the benchmark).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DispatchStats {
    /// Decisions taken, and those that switched tasks.
    pub decisions: u64,
    pub switches: u64,
    /// ns each guest was dispatched (thawed and runnable; per thread, the
    /// sum over its threads).
    pub ran_ns: Vec<u64>,
    /// EDF deadlines missed, per guest.
    pub misses: Vec<u64>,
    /// Threads dispatched as tasks of their own so far, per guest.
    pub threads: Vec<u64>,
    /// ns of real-time (`rt_priority`) dispatching, per guest.
    pub rt_ns: Vec<u64>,
    /// ns charged to each guest's budget: the CPU time it received while
    /// dispatched (its dispatched time where its CPU time cannot be read:
    /// see `charging`).
    pub charged_ns: Vec<u64>,
    /// How budgets are charged: "cpu time", or "dispatched time (why)".
    pub charging: String,
    /// How guests are kept off the CPU: "cgroup v1 freezer", or "cgroup
    /// v2 cgroup.freeze (why not v1)".
    pub stopped_by: String,
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

/// A guest's own cgroup (`gN`), which its processes join before they exec.
struct GuestCg {
    dir: PathBuf,
    procs: File,
    /// Its cgroup v1 freezer cgroup and that cgroup's `cgroup.procs`
    /// (where the v1 freezer is used).
    v1: Option<(PathBuf, File)>,
    /// Its whole cgroup's freezer (v1 or v2, as its tasks'): the guest
    /// is held frozen from its spawn until dispatching starts.
    hold: Freezer,
    /// What its tasks start with.
    params: Params,
    /// Its CPU (index into `opts.cpus` and `parts`).
    part: usize,
    ended: bool,
    /// Its cgroup's CPU time (`cpu.stat` usage_usec) when dispatching
    /// started: what it used from then on is compared with its
    /// dispatched time.
    usage0_us: u64,
}

/// How a task is kept off the CPU: the cgroup v1 freezer where that
/// hierarchy is mounted, else cgroup v2's `cgroup.freeze`. Both freeze a
/// whole cgroup, invisibly to the guests (no stop a parent could see),
/// and take a sleeping task out of its call (restarted on thaw). Why v1
/// first: a `cgroup.freeze` write takes the kernel's global cgroup mutex
/// (`cgroup_kn_lock_live`), which every cgroup mkdir, rmdir and move on
/// the machine takes too, a move across an RCU grace period: with another
/// program making and moving cgroups in a loop, `cgroup.freeze` writes
/// took p99 25 ms and at most 81 ms (40 us without), and a reservation
/// was dispatched tens of ms late or, leaving, ran on (0.156-0.183 of the
/// CPU for an `edf 2ms/10ms` spinner). `freezer.state` writes take the
/// v1 freezer's own mutex: p99 121 us, at most 421 us under the same
/// churn (bench/dispatch/RESULTS.md).
enum Freezer {
    /// `cgroup.freeze` of the task's v2 cgroup.
    V2(File),
    /// `freezer.state` of the task's v1 freezer cgroup, and that cgroup.
    V1(File, PathBuf),
}

impl Freezer {
    fn set(&self, frozen: bool) -> io::Result<()> {
        match self {
            Freezer::V2(f) => (&*f).write_all(if frozen { b"1" } else { b"0" }),
            Freezer::V1(f, _) => (&*f).write_all(if frozen { b"FROZEN" } else { b"THAWED" }),
        }
    }

    /// Its v1 cgroup, removed when the task ends.
    fn v1_dir(&self) -> Option<&Path> {
        match self {
            Freezer::V2(_) => None,
            Freezer::V1(_, d) => Some(d),
        }
    }
}

/// The cgroup v1 freezer directory of this dispatcher (below the
/// executive's own v1 freezer cgroup), made fresh; why not where there
/// is none.
fn v1_freezer_base() -> Result<PathBuf, String> {
    if std::env::var_os("MANTLE_DISPATCH_FREEZER").is_some_and(|v| v == "v2") {
        return Err("MANTLE_DISPATCH_FREEZER=v2".into());
    }
    let mount = mantle_sys::probe::cgroup1_freezer_mount()
        .ok_or("no cgroup v1 freezer hierarchy mounted")?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let rel = own
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let _id = f.next()?;
            f.next()?.split(',').any(|c| c == "freezer").then_some(())?;
            f.next()
        })
        .ok_or("not in a cgroup v1 freezer cgroup")?;
    let base = mount
        .join(rel.trim().trim_start_matches('/'))
        .join(format!("mantle-dispatch.{}", std::process::id()));
    make_own_cgroup(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    Ok(base)
}

/// What the policy schedules: a guest's cgroup, or one thread's.
struct Task {
    guest: usize,
    /// The thread (per thread), 0 per guest.
    tid: u32,
    dir: PathBuf,
    freeze: Freezer,
    frozen: bool,
    /// Not runnable (every thread asleep), as last seen.
    blocked: bool,
    ended: bool,
    /// The host class its threads were given last (None: not yet, they
    /// have what they were started or created with).
    class: Option<HostClass>,
    /// Its CPU time, read to charge its budget (None: charged by
    /// dispatched time; see [`CpuMeter`]).
    meter: Option<CpuMeter>,
}

/// A task's CPU time, to charge the policy what the task received rather
/// than how long it was dispatched: what the executive's own checks and
/// other real-time work of the host take from a dispatched guest is not
/// the guest's (charged by wall time, an `edf 2ms/10ms` spinner beside a
/// host hog got 17.9-18.8% of its CPU in 2 of 50 loaded runs).
///
/// Two sources: its cgroup's `cpu-clock` perf event on its CPU, exact to
/// the ns (a running task's time included); and its cgroup's `cpu.stat`
/// (every CPU, but up to a scheduler tick late per CPU), for what it ran
/// off its CPU (a guest may move its threads with sched_setaffinity; it
/// must not escape its budget that way). The off-CPU time is kept as the
/// largest `cpu.stat` total minus the exact on-CPU total seen so far:
/// `cpu.stat` only lags, so this never counts more than was run
/// elsewhere, and catches up within a tick.
struct CpuMeter {
    own: CgroupCpuClock,
    stat: File,
    /// `cpu.stat` usage at the start, ns.
    stat0: u64,
    /// ns run off its CPU, as far as seen (monotone).
    off: u64,
    /// The total at the last mark.
    mark: u64,
}

impl CpuMeter {
    /// Opens the meter of the cgroup at `dir` on `cpu` (its tasks should
    /// be frozen or new: the `cpu.stat` baseline is then exact).
    fn open(dir: &Path, cpu: usize) -> io::Result<CpuMeter> {
        let d = File::open(dir)?;
        let own = CgroupCpuClock::open(d.as_fd(), cpu)?;
        let stat = File::open(dir.join("cpu.stat"))?;
        let stat0 = stat_usage_ns(&stat).ok_or_else(|| io::Error::other("no usage_usec"))?;
        let mut m = CpuMeter {
            own,
            stat,
            stat0,
            off: 0,
            mark: 0,
        };
        m.mark = m.total().ok_or_else(|| io::Error::other("unreadable"))?;
        Ok(m)
    }

    /// ns of CPU since the meter was opened, wherever it ran.
    fn total(&mut self) -> Option<u64> {
        let own = self.own.read_ns().ok()?;
        let all = stat_usage_ns(&self.stat)?.saturating_sub(self.stat0);
        self.off = self.off.max(all.saturating_sub(own));
        Some(own + self.off)
    }

    /// ns of CPU since the last mark; marks now.
    fn since_mark(&mut self) -> Option<u64> {
        let t = self.total()?;
        let d = t.saturating_sub(self.mark);
        self.mark = t;
        Some(d)
    }
}

/// `usage_usec` of an open `cpu.stat`, in ns.
fn stat_usage_ns(f: &File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 256];
    let n = f.read_at(&mut b, 0).ok()?;
    std::str::from_utf8(&b[..n])
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
        .map(|us| us * 1000)
}

/// One CPU of the system: its policy over its tasks, and who runs.
struct Part {
    policy: Standard,
    current: Option<usize>,
    /// Since when `current` runs (ns since epoch).
    since: u64,
    /// The policy's next decision instant (ns since epoch).
    until: Option<u64>,
    /// The real-time window (index, `rt_window`s since epoch) and the
    /// real-time ns given in it.
    rt_window: u64,
    rt_used: u64,
    /// When `current`'s class must change: its real-time time in the
    /// window runs out, or (demoted) the window ends.
    rt_until: Option<u64>,
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
    /// A directory this dispatcher made for its guests' cgroups when the
    /// executive's own cgroup is not its reaper's (removed at drop).
    own_dir: Option<PathBuf>,
    /// This dispatcher's cgroup v1 freezer directory, where the v1
    /// freezer is used (removed at drop).
    v1_base: Option<PathBuf>,
    guests: Vec<GuestCg>,
    /// Indices are the policies' TaskIds; an ended task's index is reused.
    tasks: Vec<Task>,
    parts: Vec<Part>,
    epoch: Instant,
    next_check: Option<u64>,
    pub stats: DispatchStats,
    /// Diagnostics (`MANTLE_DISPATCH_TRACE` set): anomalies only (slow
    /// writes, late ticks, CPU time of tasks not dispatched), kept in
    /// memory and printed by `mantle run -v` at the end.
    trace: Option<Vec<String>>,
}

/// Lines of trace kept at most.
const TRACE_KEPT: usize = 4000;

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

/// Makes the cgroup `dir`, this dispatcher's alone: one that exists is
/// left over (its owner ended: the names carry its pid, or sit below a
/// cgroup made fresh for this executive) and is removed if empty; one
/// that cannot be removed has processes of someone else's and is refused.
/// Never shared: guests of two executives in one cgroup are frozen and
/// thawed by both, and each counts the other's CPU time (measured, two
/// `--fail-open` executives, whose cgroups were `g0`, `g1` at the cgroup
/// root: a guest's CPU time 0.445 s against 2.0 s dispatched in one, the
/// other's guests running while it had them frozen).
fn make_own_cgroup(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            std::fs::remove_dir(dir).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{} is in use by another process ({e})", dir.display()),
                )
            })?;
            std::fs::create_dir(dir)
        }
        r => r,
    }
}

/// Whether any thread of the cgroup at `dir` is runnable.
fn any_runnable(dir: &Path) -> bool {
    threads_of(dir).into_iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{t}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('R'))
            })
            .unwrap_or(false)
    })
}

/// A cgroup's CPU time so far (`cpu.stat` usage_usec, its descendants
/// included), µs; 0 if unreadable.
fn usage_us(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("cpu.stat"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The thread ids listed in a cgroup's `cgroup.threads` (none if it is
/// gone).
fn threads_of(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.threads"))
        .map(|s| s.lines().filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn open_write(dir: &Path, f: &str) -> io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(dir.join(f))
}

impl Dispatcher {
    /// Gives each guest (its parameters; None: best effort) a CPU of
    /// `opts.cpus` and makes one cgroup per guest below this process's own
    /// (root and cgroup v2 needed), thawed until [`Dispatcher::start`].
    pub fn new(
        opts: DispatchOptions,
        params: &[Option<Params>],
    ) -> Result<Dispatcher, DispatchError> {
        let n = params.len();
        let ps: Vec<Params> = params
            .iter()
            .map(|p| p.unwrap_or(Params::BestEffort { nice: 0 }))
            .collect();
        let part_of = partition(&ps, opts.cpus.len(), PPB)?;
        let mut base = own_cgroup().map_err(DispatchError::Cgroup)?;
        // the reaper's cgroup (mantle-exec.PID, made fresh for this
        // executive) is ours alone; anywhere else (--fail-open, or the
        // reaper could not make one) a directory of our own below it, so
        // that two executives never share a guest's cgroup
        let own_dir = if base
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("mantle-exec."))
        {
            None
        } else {
            base = base.join(format!("mantle-dispatch.{}", std::process::id()));
            make_own_cgroup(&base).map_err(DispatchError::Cgroup)?;
            Some(base.clone())
        };
        let (v1_base, stopped_by) = match v1_freezer_base() {
            Ok(b) => (Some(b), "cgroup v1 freezer".to_string()),
            Err(why) => (None, format!("cgroup v2 cgroup.freeze ({why})")),
        };
        let mut guests = Vec::with_capacity(n);
        let mut tasks = Vec::with_capacity(n);
        for (i, &params) in ps.iter().enumerate() {
            let dir = base.join(format!("g{i}"));
            make_own_cgroup(&dir).map_err(DispatchError::Cgroup)?;
            let procs = open_write(&dir, "cgroup.procs").map_err(DispatchError::Cgroup)?;
            let v1 = match &v1_base {
                Some(b) => {
                    let d = b.join(format!("g{i}"));
                    make_own_cgroup(&d).map_err(DispatchError::Cgroup)?;
                    let f = open_write(&d, "cgroup.procs").map_err(DispatchError::Cgroup)?;
                    Some((d, f))
                }
                None => None,
            };
            let hold = match &v1 {
                Some((d, _)) => Freezer::V1(
                    open_write(d, "freezer.state").map_err(DispatchError::Cgroup)?,
                    d.clone(),
                ),
                None => {
                    Freezer::V2(open_write(&dir, "cgroup.freeze").map_err(DispatchError::Cgroup)?)
                }
            };
            if opts.per == Unit::Guest {
                let freeze = match &v1 {
                    Some((d, _)) => Freezer::V1(
                        open_write(d, "freezer.state").map_err(DispatchError::Cgroup)?,
                        d.clone(),
                    ),
                    None => Freezer::V2(
                        open_write(&dir, "cgroup.freeze").map_err(DispatchError::Cgroup)?,
                    ),
                };
                tasks.push(Task {
                    guest: i,
                    tid: 0,
                    freeze,
                    dir: dir.clone(),
                    frozen: false,
                    blocked: false,
                    ended: false,
                    class: None,
                    meter: None,
                });
            }
            guests.push(GuestCg {
                dir,
                procs,
                v1,
                hold,
                params,
                part: part_of[i],
                ended: false,
                usage0_us: 0,
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
                rt_window: 0,
                rt_used: 0,
                rt_until: None,
            })
            .collect();
        Ok(Dispatcher {
            stats: DispatchStats {
                ran_ns: vec![0; n],
                misses: vec![0; n],
                threads: vec![0; n],
                rt_ns: vec![0; n],
                charged_ns: vec![0; n],
                charging: "cpu time".into(),
                stopped_by,
                lateness_ns: Vec::with_capacity(LATENESS_KEPT),
                switch_ns: Vec::with_capacity(LATENESS_KEPT),
                ..Default::default()
            },
            parts,
            opts,
            own_dir,
            v1_base,
            guests,
            tasks,
            epoch: Instant::now(),
            next_check: None,
            trace: std::env::var_os("MANTLE_DISPATCH_TRACE")
                .filter(|v| !v.is_empty())
                .map(|_| Vec::with_capacity(TRACE_KEPT)),
        })
    }

    /// Guest `i`'s `cgroup.procs`, for the child to join before it execs.
    pub fn procs_fd(&self, i: usize) -> Option<RawFd> {
        self.guests.get(i).map(|g| g.procs.as_raw_fd())
    }

    /// Guest `i`'s cgroup v1 freezer `cgroup.procs`, for the child to
    /// join too (None where the v2 freezer is used).
    pub fn freezer_procs_fd(&self, i: usize) -> Option<RawFd> {
        self.guests.get(i)?.v1.as_ref().map(|(_, f)| f.as_raw_fd())
    }

    /// The CPUs guest `i` runs on (its part's one CPU).
    pub fn cpus_of(&self, i: usize) -> &[usize] {
        match self.guests.get(i) {
            Some(g) => std::slice::from_ref(&self.opts.cpus[g.part]),
            None => &[],
        }
    }

    /// The CPU guest `i` is dispatched on.
    pub fn cpu_of(&self, i: usize) -> Option<usize> {
        self.guests.get(i).map(|g| self.opts.cpus[g.part])
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn part_of(&self, k: usize) -> usize {
        self.guests[self.tasks[k].guest].part
    }

    fn note(&mut self, msg: impl FnOnce() -> String) {
        let at = self.ns(Instant::now());
        if let Some(t) = self.trace.as_mut().filter(|t| t.len() < TRACE_KEPT) {
            t.push(format!("{:.6} {}", at as f64 / 1e9, msg()));
        }
    }

    /// What the trace kept (empty unless `MANTLE_DISPATCH_TRACE` is set).
    pub fn trace(&self) -> &[String] {
        self.trace.as_deref().unwrap_or(&[])
    }

    fn set_frozen(&mut self, k: usize, frozen: bool) {
        let t = &mut self.tasks[k];
        if t.frozen != frozen && !t.ended {
            let t0 = Instant::now();
            // a failed write leaves the state as it was (the task ended)
            let r = t.freeze.set(frozen);
            if r.is_ok() {
                t.frozen = frozen;
            }
            let took = t0.elapsed();
            if self.trace.is_some() && (r.is_err() || took > Duration::from_millis(1)) {
                self.note(|| format!("task {k} freeze={} took {took:?}: {r:?}", frozen as u8));
            }
        }
    }

    /// Gives every thread of task `k` the host class `c` (nothing to do
    /// when it has it: threads created since inherited it).
    fn set_class(&mut self, k: usize, c: HostClass) {
        let t = &mut self.tasks[k];
        if t.ended || t.class == Some(c) {
            return;
        }
        let t0 = Instant::now();
        for tid in threads_of(&t.dir) {
            // a thread that ended meanwhile: nothing to set
            let _ = set_class_of(tid, c);
        }
        t.class = Some(c);
        let took = t0.elapsed();
        if self.trace.is_some() && took > Duration::from_millis(1) {
            self.note(|| format!("task {k} class {c:?} took {took:?}"));
        }
    }

    /// The executive runs at SCHED_FIFO `prio` (None: normal priority):
    /// dispatched reservations run real-time below it (`rt_priority`,
    /// lowered to `prio - 1`), or at SCHED_OTHER if it is not real-time
    /// (a real-time guest would keep a normal executive from deciding).
    pub fn below_executive(&mut self, prio: Option<i32>) {
        self.opts.rt_priority = match prio {
            Some(p) => self.opts.rt_priority.min(p - 1),
            None => 0,
        };
    }

    fn rt_cap_ns(&self) -> u64 {
        (self.opts.rt_window.as_nanos() as u64).saturating_mul(self.opts.rt_share_ppb) / PPB
    }

    /// The class task `k`, dispatched on part `p`, runs at: real-time for a
    /// reservation (EDF, fixed priority) while the CPU's real-time time in
    /// this window lasts, normal otherwise; and when that must change.
    fn dispatch_class(&self, k: usize, p: usize, now: u64) -> (HostClass, Option<u64>) {
        let part = &self.parts[p];
        let reserved = matches!(
            part.policy.params(TaskId(k as u32)),
            Some(Params::Edf { .. } | Params::Fixed { .. })
        );
        if !reserved || self.opts.rt_priority < 1 {
            return (HostClass::Other, None);
        }
        let cap = self.rt_cap_ns();
        let w = (self.opts.rt_window.as_nanos() as u64).max(1);
        if part.rt_used < cap {
            (
                HostClass::Rr(self.opts.rt_priority),
                Some(now + (cap - part.rt_used)),
            )
        } else {
            (HostClass::Other, Some((now / w + 1) * w))
        }
    }

    /// Holds guest `i` frozen from now until [`Dispatcher::start`] (call it
    /// once the guest is spawned): a guest must not run its program while
    /// the executive starts the others. Before, guests ran freely until
    /// dispatching started; where spawning waited for the cgroup mutex
    /// (each guest joins its cgroups; measured 10 s for one system under
    /// another program's cgroup churn) the first guests of a 2 s test ran
    /// their whole program undispatched, and were never dispatched at all
    /// (CPU and dispatched time 0.000 s, 2 of 14 logged loaded runs).
    pub fn hold(&mut self, i: usize) {
        let Some(g) = self.guests.get(i) else { return };
        if g.hold.set(true).is_ok() && self.opts.per == Unit::Guest {
            if let Some(t) = self.tasks.get_mut(i) {
                t.frozen = true;
            }
        }
    }

    /// Admits every guest (per thread: every thread there is now) with its
    /// parameters and freezes them all; the first [`Dispatcher::tick`]
    /// takes the first decision.
    pub fn start(&mut self) -> Result<(), (usize, AdmitError)> {
        let now = self.ns(Instant::now());
        if self.opts.per == Unit::Guest {
            for k in 0..self.tasks.len() {
                let (g, part) = (self.tasks[k].guest, self.part_of(k));
                let p = self.guests[g].params;
                self.parts[part]
                    .policy
                    .add(TaskId(k as u32), p, now)
                    .map_err(|e| (g, e))?;
            }
        } else {
            self.discover(now);
        }
        for k in 0..self.tasks.len() {
            self.set_frozen(k, true);
        }
        if self.opts.per == Unit::Thread {
            // each thread frozen in its own cgroup now: the guest's whole
            // cgroup is let go (per guest it is the task's own)
            for g in &self.guests {
                let _ = g.hold.set(false);
            }
        }
        for g in &mut self.guests {
            g.usage0_us = usage_us(&g.dir);
        }
        for k in 0..self.tasks.len() {
            self.open_meter(k);
        }
        if self.trace.is_some() {
            for k in 0..self.tasks.len() {
                let (th, m) = (
                    threads_of(&self.tasks[k].dir),
                    self.tasks[k].meter.is_some(),
                );
                self.note(|| format!("start: task {k} threads {th:?} meter {m}"));
            }
        }
        // the first decision when the executive's loop first ticks: taken
        // here, the first quantum would start before the loop does and its
        // end be seen late by the executive's remaining set-up (the ~3 ms
        // maximum lateness every bench/dispatch run showed)
        self.next_check = Some(0);
        Ok(())
    }

    /// Per thread: gives every thread of the guests not yet a task a
    /// threaded cgroup of its own and adds it to its guest's CPU's policy
    /// with the guest's parameters; a task whose thread is gone ends.
    /// Threads are found in the guest's cgroup (not yet moved: the first
    /// thread of each process) and in each task's (born there).
    fn discover(&mut self, now: u64) {
        if self.opts.per != Unit::Thread {
            return;
        }
        for g in 0..self.guests.len() {
            if self.guests[g].ended {
                continue;
            }
            let mut found = threads_of(&self.guests[g].dir);
            for t in self.tasks.iter().filter(|t| t.guest == g && !t.ended) {
                found.extend(threads_of(&t.dir).into_iter().filter(|&x| x != t.tid));
            }
            for tid in found {
                if !self.tasks.iter().any(|t| !t.ended && t.tid == tid) {
                    let _ = self.adopt(g, tid, now);
                }
            }
        }
        for k in 0..self.tasks.len() {
            let t = &self.tasks[k];
            if !t.ended && threads_of(&t.dir).is_empty() {
                self.end_task(k, now);
            }
        }
    }

    /// Moves thread `tid` of guest `g` into a threaded cgroup of its own
    /// and makes it a task (thawed: the next decision freezes it unless
    /// picked).
    fn adopt(&mut self, g: usize, tid: u32, now: u64) -> io::Result<usize> {
        let dir = self.guests[g].dir.join(format!("t{tid}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let v1 = self.guests[g]
            .v1
            .as_ref()
            .map(|(d, _)| d.join(format!("t{tid}")));
        let setup = || -> io::Result<Freezer> {
            open_write(&dir, "cgroup.type")?.write_all(b"threaded")?;
            open_write(&dir, "cgroup.threads")?.write_all(tid.to_string().as_bytes())?;
            match &v1 {
                Some(d) => {
                    match std::fs::create_dir(d) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                        _ => {}
                    }
                    open_write(d, "tasks")?.write_all(tid.to_string().as_bytes())?;
                    Ok(Freezer::V1(open_write(d, "freezer.state")?, d.clone()))
                }
                None => Ok(Freezer::V2(open_write(&dir, "cgroup.freeze")?)),
            }
        };
        let freeze = match setup() {
            Ok(f) => f,
            Err(e) => {
                // the thread ended meanwhile, most likely
                let _ = std::fs::remove_dir(&dir);
                if let Some(d) = &v1 {
                    let _ = std::fs::remove_dir(d);
                }
                return Err(e);
            }
        };
        let task = Task {
            guest: g,
            tid,
            dir,
            freeze,
            frozen: false,
            blocked: false,
            ended: false,
            class: None,
            meter: None,
        };
        let k = match self.tasks.iter().position(|t| t.ended) {
            Some(k) => {
                self.tasks[k] = task;
                k
            }
            None => {
                self.tasks.push(task);
                self.tasks.len() - 1
            }
        };
        let part = self.guests[g].part;
        let p = self.guests[g].params;
        if self.parts[part]
            .policy
            .add(TaskId(k as u32), p, now)
            .is_err()
        {
            // a thread of an EDF guest beyond its CPU's admission bound
            // (each thread asks for the guest's reservation): best effort
            // instead, rather than never dispatched
            let be = Params::BestEffort { nice: 0 };
            let _ = self.parts[part].policy.add(TaskId(k as u32), be, now);
        }
        self.stats.threads[g] += 1;
        self.open_meter(k);
        Ok(k)
    }

    /// Task `k`'s CPU meter; if it cannot be had, the task is charged by
    /// dispatched time and the summary says why.
    fn open_meter(&mut self, k: usize) {
        let cpu = self.opts.cpus[self.part_of(k)];
        let t = &mut self.tasks[k];
        if t.ended || t.meter.is_some() {
            return;
        }
        match CpuMeter::open(&t.dir, cpu) {
            Ok(m) => t.meter = Some(m),
            Err(e) => {
                if !self.stats.charging.starts_with("dispatched") {
                    self.stats.charging =
                        format!("dispatched time (the cgroup's cpu-clock perf event: {e})");
                }
            }
        }
    }

    fn end_task(&mut self, k: usize, now: u64) {
        let part = self.part_of(k);
        let t = &mut self.tasks[k];
        if t.ended {
            return;
        }
        t.ended = true;
        t.meter = None;
        let _ = self.parts[part].policy.remove(TaskId(k as u32), now);
        if self.parts[part].current == Some(k) {
            self.parts[part].current = None;
        }
        if t.tid != 0 {
            let _ = std::fs::remove_dir(&t.dir);
            if let Some(d) = t.freeze.v1_dir() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }

    /// The task of guest `i`'s thread `tid`: per guest the guest's, per
    /// thread the thread's (adopted now if not yet).
    fn task_of(&mut self, i: usize, tid: u32, now: u64) -> Option<usize> {
        match self.opts.per {
            Unit::Guest => (i < self.tasks.len()).then_some(i),
            Unit::Thread => self
                .tasks
                .iter()
                .position(|t| !t.ended && t.tid == tid)
                .or_else(|| self.adopt(i, tid, now).ok()),
        }
    }

    /// The next instant the executive must call [`Dispatcher::tick`].
    pub fn next_due(&self) -> Option<Instant> {
        let at = self
            .parts
            .iter()
            .flat_map(|p| [p.until, p.rt_until])
            .flatten()
            .chain(self.next_check)
            .min();
        at.map(|ns| self.epoch + Duration::from_nanos(ns))
    }

    /// Something may have changed for guest `i` (a call of it was held or
    /// released): check at once.
    pub fn poke(&mut self, _i: usize) {
        self.next_check = Some(0);
    }

    /// Guest `i` ended: its tasks are never picked again.
    pub fn exit(&mut self, i: usize) {
        let now = self.ns(Instant::now());
        let Some(g) = self.guests.get_mut(i) else {
            return;
        };
        g.ended = true;
        self.account(now);
        if self.trace.is_some() {
            let (ran, cpu) = (self.stats.ran_ns[i], self.cpu_ns()[i]);
            self.note(|| format!("guest {i} ended: dispatched {ran} ns, cpu {cpu} ns"));
        }
        for k in 0..self.tasks.len() {
            if self.tasks[k].guest == i {
                self.end_task(k, now);
            }
        }
        self.decide(now);
    }

    /// Guest `i`'s thread `tid` asks for new parameters (its
    /// sched_setscheduler and the like, mapped by crate::sched::guest):
    /// per guest they are the whole guest's, per thread the thread's.
    pub fn change(&mut self, i: usize, tid: u32, p: Params) -> Result<(), ChangeError> {
        let now = self.ns(Instant::now());
        self.account(now);
        let r = match self.task_of(i, tid, now) {
            Some(k) => {
                let part = self.part_of(k);
                self.parts[part].policy.change(TaskId(k as u32), p, now)
            }
            None => Err(ChangeError::Unknown(UnknownTask(TaskId(u32::MAX)))),
        };
        self.decide(now);
        r
    }

    /// Guest `i`'s thread `tid` gives up the rest of its turn (its
    /// `sched_yield`): the policy's yield, then a new decision.
    pub fn yield_now(&mut self, i: usize, tid: u32) {
        let now = self.ns(Instant::now());
        self.account(now);
        if let Some(k) = self.task_of(i, tid, now) {
            let part = self.part_of(k);
            let _ = self.parts[part].policy.yield_now(TaskId(k as u32), now);
        }
        self.decide(now);
    }

    /// The parameters guest `i` is scheduled with (per thread: its first
    /// thread's, or what its threads start with).
    pub fn params(&self, i: usize) -> Option<Params> {
        let g = self.guests.get(i)?;
        let k = self.tasks.iter().position(|t| t.guest == i && !t.ended);
        match k {
            Some(k) => self.parts[g.part].policy.params(TaskId(k as u32)),
            None => Some(g.params),
        }
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
        let ran: Vec<String> = self
            .stats
            .ran_ns
            .iter()
            .map(|ns| format!("{:.3}", *ns as f64 / 1e9))
            .collect();
        let secs = |v: &[u64]| -> String {
            v.iter()
                .map(|ns| format!("{:.3}", *ns as f64 / 1e9))
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "{} decisions, {} switches, {} deadline misses; lateness at quantum end: {}; switch: {}; cpu s per guest: {}; real-time s per guest: {}; charged s per guest: {}; charged by: {}; stopped by: {}; dispatched s per guest: {}",
            self.stats.decisions,
            self.stats.switches,
            self.stats.misses.iter().sum::<u64>(),
            q(&self.stats.lateness_ns),
            q(&self.stats.switch_ns),
            secs(&self.cpu_ns()),
            secs(&self.stats.rt_ns),
            secs(&self.stats.charged_ns),
            self.stats.charging,
            self.stats.stopped_by,
            ran.join(" ")
        )
    }

    /// The CPU time each guest's cgroup used since dispatching started
    /// (`cpu.stat`, its processes and threads together), ns: to compare
    /// with its dispatched time.
    pub fn cpu_ns(&self) -> Vec<u64> {
        self.guests
            .iter()
            .map(|g| usage_us(&g.dir).saturating_sub(g.usage0_us) * 1000)
            .collect()
    }

    /// Which task is dispatched on each CPU (in `cpus` order): the guest,
    /// and the thread per thread (0 per guest).
    pub fn current(&self) -> Vec<Option<(usize, u32)>> {
        self.parts
            .iter()
            .map(|p| p.current.map(|k| (self.tasks[k].guest, self.tasks[k].tid)))
            .collect()
    }

    /// Decides when due (or when poked): charges the tasks that ran,
    /// updates who is blocked (and, per thread, which threads there are),
    /// picks, and freezes and thaws accordingly.
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
        if self.trace.is_some() {
            let due = self.next_due().map(|t| self.ns(t)).unwrap_or(now);
            if now.saturating_sub(due) > 2_000_000 {
                let cur = self.current();
                self.note(|| format!("tick {} us late; current {cur:?}", (now - due) / 1000));
            }
        }
        self.account(now);
        self.decide(now);
    }

    fn account(&mut self, now: u64) {
        let w = (self.opts.rt_window.as_nanos() as u64).max(1);
        for part in &mut self.parts {
            if let Some(c) = part.current {
                let ran = now.saturating_sub(part.since);
                let g = self.tasks[c].guest;
                self.stats.ran_ns[g] += ran;
                if matches!(self.tasks[c].class, Some(HostClass::Rr(_))) {
                    self.stats.rt_ns[g] += ran;
                    part.rt_used += ran;
                }
                // a reservation is charged the CPU time it received, not
                // its dispatched time; best effort by dispatched time: it
                // shares its CPU with the host's normal tasks by fair
                // share, so a quantum of CPU could last seconds under
                // load (measured: two round-robin spinners got 0.049 and
                // 0.033 s in 2 s, uneven turns of hundreds of ms)
                let reserved = matches!(
                    part.policy.params(TaskId(c as u32)),
                    Some(Params::Edf { .. } | Params::Fixed { .. })
                );
                let cpu = self.tasks[c]
                    .meter
                    .as_mut()
                    .and_then(CpuMeter::since_mark)
                    .filter(|_| reserved)
                    .unwrap_or(ran);
                self.stats.charged_ns[g] += cpu;
                let _ = part.policy.charge(TaskId(c as u32), cpu, now);
            }
            part.since = now;
            if now / w != part.rt_window {
                part.rt_window = now / w;
                part.rt_used = 0;
            }
        }
        if self.trace.is_some() {
            self.trace_undispatched();
        }
        self.discover(now);
        // who is runnable: the dispatched tasks and the thawed blocked ones
        for k in 0..self.tasks.len() {
            let t = &self.tasks[k];
            if t.ended || (t.frozen && !t.blocked) {
                continue;
            }
            let runnable = any_runnable(&t.dir);
            let id = TaskId(k as u32);
            let part = self.part_of(k);
            let policy = &mut self.parts[part].policy;
            if runnable && self.tasks[k].blocked {
                self.tasks[k].blocked = false;
                let _ = policy.wake(id, now);
            } else if !runnable && !self.tasks[k].blocked {
                self.tasks[k].blocked = true;
                let _ = policy.block(id, now);
            }
        }
        for part in &mut self.parts {
            for m in part.policy.take_misses() {
                let g = self.tasks.get(m.task.0 as usize).map(|t| t.guest);
                if let Some(x) = g.and_then(|g| self.stats.misses.get_mut(g)) {
                    *x += 1;
                }
            }
        }
    }

    /// Trace: the CPU time of every task not dispatched since the last
    /// look (its meter's mark is reset when it is dispatched, so reading
    /// it here changes no charge).
    fn trace_undispatched(&mut self) {
        let current: Vec<usize> = self.parts.iter().filter_map(|p| p.current).collect();
        for k in 0..self.tasks.len() {
            if current.contains(&k) || self.tasks[k].ended {
                continue;
            }
            let t = &mut self.tasks[k];
            let Some(d) = t.meter.as_mut().and_then(CpuMeter::since_mark) else {
                continue;
            };
            if d > 200_000 {
                let (frozen, blocked, class) = (t.frozen, t.blocked, t.class);
                let threads = threads_of(&t.dir);
                let states: Vec<String> = threads
                    .iter()
                    .map(|tid| {
                        std::fs::read_to_string(format!("/proc/{tid}/stat"))
                            .ok()
                            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r[1..2].to_owned()))
                            .unwrap_or_default()
                    })
                    .collect();
                self.note(|| {
                    format!(
                        "task {k} ran {} us undispatched (frozen {frozen}, blocked {blocked}, class {class:?}, threads {threads:?} {states:?})",
                        d / 1000
                    )
                });
            }
        }
    }

    fn decide(&mut self, now: u64) {
        for p in 0..self.parts.len() {
            self.decide_part(p, now);
        }
        // check the dispatched tasks (they may block), the thawed blocked
        // ones (they may wake), and per thread for new threads
        let watch = self.parts.iter().any(|p| p.current.is_some())
            || self.tasks.iter().any(|t| t.blocked && !t.ended)
            || (self.opts.per == Unit::Thread && self.guests.iter().any(|g| !g.ended));
        self.next_check = watch.then(|| now + self.opts.check.as_nanos() as u64);
    }

    fn decide_part(&mut self, p: usize, now: u64) {
        let d = self.parts[p].policy.pick(now);
        self.stats.decisions += 1;
        let next = d.task.map(|t| t.0 as usize);
        let current = self.parts[p].current;
        let (class, rt_until) = match next {
            Some(n) => self.dispatch_class(n, p, now),
            None => (HostClass::Other, None),
        };
        let mut thawed_at = None;
        if next != current {
            self.stats.switches += 1;
            if self.trace.is_some() && self.stats.switches <= 12 {
                self.note(|| {
                    format!(
                        "part {p} switch {current:?} -> {next:?} until {:?}",
                        d.until
                    )
                });
            }
            let t0 = Instant::now();
            // The leaving task stops first. With the v1 freezer (its writes
            // bounded: at most 421 us measured under cgroup churn) it is
            // frozen at once, at its class: a running real-time task takes
            // the freeze within microseconds. With cgroup v2's
            // `cgroup.freeze`, whose write waits for the kernel's global
            // cgroup mutex (p99 25 ms, max 81 ms under another program's
            // cgroup churn; see [`Freezer`]), it is made SCHED_IDLE first, a
            // class change (at most 58 us under the same churn): frozen
            // first, a leaving reservation ran on at SCHED_RR for the whole
            // wait (85 ms of CPU undispatched in one 2 s run), keeping the
            // CPU from the mutex's holder too if that sat on its CPU; and
            // the next task is thawed before the leaving one is frozen, so
            // that a slow freeze does not delay it. A blocked leaving task
            // stays thawed, so that its wake-up is seen, but idle
            // (SCHED_IDLE): woken, it takes no CPU from the dispatched task,
            // real-time or normal, until the next check freezes or picks it.
            let v1 = self.v1_base.is_some();
            if let Some(c) = current {
                if v1 && !self.tasks[c].blocked {
                    self.set_frozen(c, true);
                } else {
                    self.set_class(c, HostClass::Idle);
                }
            }
            if let Some(n) = next {
                // its CPU time counts from here (what it ran undispatched,
                // blocked and idle, is not its budget's)
                if let Some(m) = self.tasks[n].meter.as_mut() {
                    let _ = m.since_mark();
                }
                self.set_class(n, class);
                // its dispatched time counts from when it can run: the
                // thaw (it runs from within the write, so from its start)
                thawed_at = Some(self.ns(Instant::now()));
                self.set_frozen(n, false);
            }
            if let Some(c) = current {
                if !v1 && !self.tasks[c].blocked {
                    self.set_frozen(c, true);
                }
            }
            self.parts[p].current = next;
            if self.stats.switch_ns.len() < LATENESS_KEPT {
                self.stats.switch_ns.push(t0.elapsed().as_nanos() as u64);
            }
        } else if let Some(n) = next {
            // its real-time time in the window ran out, or a new window
            self.set_class(n, class);
        }
        // this CPU's tasks that are thawed but not picked: frozen if
        // runnable, idle if blocked
        for k in 0..self.tasks.len() {
            if self.part_of(k) != p || Some(k) == next || self.tasks[k].ended {
                continue;
            }
            if self.tasks[k].blocked {
                if !self.tasks[k].frozen {
                    self.set_class(k, HostClass::Idle);
                }
            } else {
                self.set_frozen(k, true);
            }
        }
        self.parts[p].rt_until = rt_until;
        self.parts[p].since = thawed_at.unwrap_or(now).max(now);
        self.parts[p].until = d.until;
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // thawed, so that whatever is left runs to its end; threads'
        // cgroups first (a guest's cgroup goes once they are gone)
        for t in &self.tasks {
            if !t.ended && t.class.is_some_and(|c| c != HostClass::Other) {
                for tid in threads_of(&t.dir) {
                    let _ = set_class_of(tid, HostClass::Other);
                }
            }
            let _ = t.freeze.set(false);
            if t.tid != 0 {
                let _ = std::fs::remove_dir(&t.dir);
                if let Some(d) = t.freeze.v1_dir() {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
        for g in &self.guests {
            let _ = g.hold.set(false);
            let _ = std::fs::remove_dir(&g.dir);
            if let Some((d, _)) = &g.v1 {
                let _ = std::fs::remove_dir(d);
            }
        }
        if let Some(d) = &self.own_dir {
            let _ = std::fs::remove_dir(d);
        }
        if let Some(d) = &self.v1_base {
            let _ = std::fs::remove_dir(d);
        }
    }
}

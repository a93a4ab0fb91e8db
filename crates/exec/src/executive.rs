//! The executive: a thread (or one per CPU it is given, each serving the
//! guests of its CPU's run queue: docs/exec.md "On N CPUs") that serves
//! the guests' interposed calls on the protected path, holds calls it was
//! asked to delay, notices guests ending, and publishes its status. Its
//! state is under [`StatLock`]s: per run queue, per guest and one shared,
//! plus one giant lock around everything with `Locking::Giant`; the lock
//! order is crate::lib's.
//!
//! Mechanism: guests are started (crate::launch) before anything else;
//! then the thread takes SCHED_FIFO and locks its memory (mlockall) when
//! asked (`priority`) or, by default, when it keeps time or dispatches
//! ([`keeps_time`]; a warning when refused), else stays SCHED_OTHER, and
//! waits with
//! ppoll on a set kept between waits (mantle_sys::epoll::PollSet: poll,
//! not epoll, so that SYNC_WAKE_UP's wake-up on the guest's CPU reaches
//! the executive) on each guest's listener, pidfd and start-status pipe,
//! plus the opener thread's wake-up pipe (crate::perform) and the QoS
//! reader's epoll set. A notification is
//! received (ENOENT: it vanished: counted, never fatal), made a [`Call`],
//! decided by the guest's [`Chain`] (with a [`ProtectedGuest`] to read
//! memory), and answered: Continue → SECCOMP_USER_NOTIF_FLAG_CONTINUE,
//! Fail → -errno, Return → the value, Delay → held (the poll timeout is
//! the next deadline; other guests keep being served) and decided again
//! when due, Perform → getppid here, the open family on the opener thread,
//! anything else ENOSYS (said once per call name). Then the chain's
//! `after` sees the outcome and the times. A call to the executive
//! (mantle_abi::exec::SYS_EXEC, always in the filter) never reaches the
//! chain: crate::rpc answers it (ping, guest ↔ guest RPC), holding the
//! calls that wait; they are swept every 100 ms and answered -ECONNRESET
//! when the executive ends.
//!
//! Invariants: a guest's end is final (its listener is polled until it
//! hangs up, so that its remaining children are still served while
//! others run); nothing a guest sends can make this thread panic or stop
//! (every value from a notification is checked or passed on as a number).
//!
//! Allocation-free on the path for `--perform getppid` (tests/alloc.rs);
//! not yet in general (docs/exec.md "Limits"): agents may allocate, the
//! open family reads /proc and goes through channels, getppid of a new
//! process other than a guest's first reads /proc.

use crate::agent::{Agent, Call, Chain, Outcome, Times};
use crate::executor::{Action, Executor};
use crate::launch::{self, LaunchError, Prepared};
use crate::lockstat::{rank, LockStats, StatGuard, StatLock};
use crate::perform::{self, OpenRequest, Opener};
use crate::protected::{self, ProtectedGuest};
use crate::rpc::{self, Peers, Rpc};
use crate::status::{self, CallStat, ExecStatus, GuestStatus};
use crate::sysno::Sysno;
use mantle_sys::epoll::{PollSet, Ready};
use mantle_sys::seccomp::Listener;
use mantle_sys::supervise;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the executive runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// SCHED_FIFO priority; 0: stay SCHED_OTHER; None: decided by
    /// [`keeps_time`]: 99 (where allowed) when the executive keeps time or
    /// dispatches, else SCHED_OTHER. Why: on a CPU shared with a guest at
    /// SCHED_OTHER, a real-time executive pays a class switch each way per
    /// call (about 2.3 us per round trip on the reference VM, and
    /// SYNC_WAKE_UP's same-CPU wake-up is honoured by the fair class only),
    /// which only buys something when an answer is due at a time.
    pub priority: Option<i32>,
    /// Use SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP where the kernel has it.
    pub sync_wake: bool,
    /// Recorded in the status (the reaper carries the policy out).
    pub fail_open: bool,
    /// Where to publish the status file (None: not at all).
    pub status_dir: Option<PathBuf>,
    /// Take SCHED_FIFO and lock memory (off in tests that embed an
    /// executive in a test process).
    pub realtime: bool,
    /// Extended mode (`--sleep-spin`): the last stretch before a held call
    /// is due is busy-waited instead of slept, so it is answered below the
    /// timer's granularity (Hijack Extended); costs that much CPU per held
    /// call. Zero: off.
    pub spin_before: Duration,
    /// `--boost N`: a guest thread whose held call the executive releases
    /// (a sleep come due, a delay over) runs at SCHED_FIFO N, below the
    /// executive, until its next interposed call (then SCHED_OTHER again):
    /// what the executive releases runs before the machine's normal tasks
    /// and before guests that were not released. None: no change.
    pub boost: Option<i32>,
    /// The executive decides which guest runs (crate::dispatch); None:
    /// the host's scheduler does.
    pub dispatch: Option<crate::dispatch::DispatchOptions>,
    /// Say at the end what dispatching did (decisions, lateness).
    pub verbose: bool,
    /// The QoS reader's token period (with guests that have a `qos`).
    pub qos_period: Duration,
    /// `[executive] cpus`, `--exec-cpus`: one executive thread per CPU,
    /// pinned to it, serving the guests pinned to that CPU (issue 31).
    /// Empty: one thread, unpinned, guests where the host puts them.
    pub cpus: Vec<usize>,
    /// `[executive] locking`, `--exec-locking`: how the executive threads
    /// share its state ([`Locking`]).
    pub locking: Locking,
}

/// The two designs of the executive on N CPUs (Kågström, Paper II),
/// chosen at start. Both run the same code: the fine design's locks are
/// always there; the giant design adds one lock around everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Locking {
    /// One lock, taken when a thread enters the executive (its wait
    /// returned) and released when it leaves (before its next wait):
    /// uniprocessor semantics, one thread in the executive at a time.
    Giant,
    /// A lock per CPU run queue, per guest (its chain of agents, their
    /// state, its counts) and one for what all guests share (held calls,
    /// timers, RPC, dispatch, QoS): threads serving different guests run
    /// in the executive at once.
    #[default]
    Fine,
}

impl Locking {
    pub fn name(self) -> &'static str {
        match self {
            Locking::Giant => "giant",
            Locking::Fine => "fine",
        }
    }
}

impl std::str::FromStr for Locking {
    type Err = String;
    fn from_str(s: &str) -> Result<Locking, String> {
        match s {
            "giant" => Ok(Locking::Giant),
            "fine" => Ok(Locking::Fine),
            _ => Err(format!("{s:?}: expected giant or fine")),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            priority: None,
            sync_wake: true,
            fail_open: false,
            status_dir: Some(status::dir()),
            realtime: true,
            spin_before: Duration::ZERO,
            boost: None,
            dispatch: None,
            verbose: false,
            qos_period: Duration::from_millis(100),
            cpus: Vec::new(),
            locking: Locking::default(),
        }
    }
}

/// A guest to start.
pub struct GuestSpec {
    pub name: String,
    pub argv: Vec<String>,
    pub agents: Vec<Box<dyn Agent>>,
    /// How the executive schedules it (with `Options::dispatch`; None:
    /// best effort).
    pub sched: Option<crate::sched::Params>,
    /// Its I/O reservation: the executive reads its sockets for it
    /// (crate::qos). None: it reads them itself.
    pub qos: Option<crate::qos::Rate>,
    /// What the kernel enforces for it (`agents::Built::enforce`).
    pub enforce: crate::enforce::Enforcement,
    /// The guests (indexes) it may call by RPC or connect a channel to;
    /// None: every guest (crate::rpc::may_call).
    pub rpc_to: Option<Vec<usize>>,
}

/// How a guest ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    Exited(i32),
    Killed {
        signal: i32,
        core: bool,
    },
    /// It never ran the command: the step that failed and its errno.
    NotStarted {
        step: &'static str,
        errno: i32,
    },
}

impl End {
    /// The exit status a shell would show: the code, 128+signal, or 127
    /// (not found) / 126 (cannot execute).
    pub fn shell_status(&self) -> i32 {
        match self {
            End::Exited(c) => *c,
            End::Killed { signal, .. } => 128 + signal,
            // the exec failed: a wrapper's codes (env, timeout)
            End::NotStarted { step, errno } if *step == launch::step_name(supervise::STEP_EXEC) => {
                if *errno == libc::ENOENT {
                    127
                } else {
                    126
                }
            }
            // a step of mantle's own before it (the redirect's mount...)
            End::NotStarted { .. } => 125,
        }
    }
}

/// What happened to one guest.
#[derive(Clone, Debug)]
pub struct GuestEnd {
    pub name: String,
    pub pid: u32,
    pub end: End,
    /// Notifications that vanished (ENOENT: caller killed or interrupted).
    pub vanished: u64,
    /// Interposed calls answered, by name.
    pub calls: Vec<(String, u64)>,
}

/// What the executive set up, for `-v` and `exec status`.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The executive asked for SCHED_FIFO (asked for, or by default
    /// because it keeps time): an Err in `priority` is then a refusal.
    pub fifo_wanted: bool,
    pub priority: Result<i32, String>,
    pub memory_locked: Result<(), String>,
    pub sync_wake_up: bool,
    pub filters: Vec<(String, Vec<String>)>,
}

/// Whether the executive keeps time or dispatches, so that its default
/// priority is real-time: it holds calls until a time (`sleep`, `delay`,
/// extended mode), fires timers, boosts released threads, dispatches
/// guests (`sched` agent, a dispatcher) or paces reads (QoS). Agents that
/// only observe or decide at once (count, trace, perform, stamp) answer
/// as soon as they can, and a SCHED_OTHER executive does that fastest on
/// a shared CPU (the class switch; SYNC_WAKE_UP).
pub fn keeps_time<'a>(
    opts: &Options,
    agent_names: impl IntoIterator<Item = &'a str>,
    qos: bool,
) -> bool {
    opts.dispatch.is_some()
        || opts.boost.is_some()
        || !opts.spin_before.is_zero()
        || qos
        || agent_names
            .into_iter()
            .any(|n| matches!(n, "sleep" | "delay" | "timers" | "sched"))
}

/// Why the executive could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("guest {name}: {source}")]
    Launch {
        name: String,
        #[source]
        source: LaunchError,
    },
    #[error("{what}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

struct Stat {
    nr: Sysno,
    count: u64,
    executive_ns: u64,
    kernel_ns: u64,
}

/// What never changes about a guest once started (read without a lock).
struct G {
    name: String,
    argv: Vec<String>,
    pid: u32,
    pidfd: OwnedFd,
    listener: Arc<Listener>,
    /// Some task still uses its filter (cleared when the listener hangs
    /// up; read by RPC under the shared lock, so an atomic).
    listener_open: AtomicBool,
    agent_names: Vec<String>,
    /// The executive thread (index in the run queues) that serves it.
    home: AtomicUsize,
}

/// A guest's state under its own lock (rank GUEST): its chain (the
/// agents' state is per guest: each guest has its own agent instances),
/// its counts, how it ended.
struct GState {
    chain: Chain,
    status: Option<OwnedFd>,
    end: Option<End>,
    stats: Vec<Stat>,
    vanished: u64,
    executive_ns: u64,
    said_enosys: Vec<Sysno>,
}

impl GState {
    fn stat(&mut self, nr: Sysno) -> Option<&mut Stat> {
        self.stats.iter_mut().find(|s| s.nr == nr)
    }
}

/// What all guests share, under one lock (rank SHARED): touched by calls
/// that hold, perform an open, arm a timer, schedule, or call the
/// executive, and by the periodic duties; never by a call an agent
/// answers at once (Continue, Fail, Return).
struct Shared {
    held: Vec<Held>,
    opener: Option<Opener>,
    pending_opens: usize,
    rpc: Rpc,
    /// Carries out the agents' decisions; keeps timers and parents
    /// (crate::executor, shared with the fast path).
    exec: Executor,
    /// Which guest runs, when the executive decides (Options::dispatch).
    dispatch: Option<crate::dispatch::Dispatcher>,
    /// Reads sockets for guests with a reservation (GuestSpec::qos).
    qos: Option<crate::qos::Qos>,
    /// Guest threads running boosted (`Options::boost`), until their next
    /// interposed call.
    boosted: Vec<u32>,
    /// Writes the status file (None: not asked for, or it failed).
    publisher: Option<status::Publisher>,
    status_dir: Option<PathBuf>,
    log: Box<dyn FnMut(&str) + Send>,
}

/// A CPU's run queue (rank RUNQUEUE): the guests its executive thread
/// serves. Held by that thread while it serves a batch of ready guests,
/// so that a guest is served by one thread at a time; the policy moves a
/// guest by taking it out of one queue and putting it in another
/// ([`Executive::move_guest`]), one lock after the other.
#[derive(Default)]
struct RunQueue {
    guests: Vec<usize>,
    /// Bumped at every change: the thread re-registers its wait set.
    generation: u64,
}

// What a ready fd is (Executive::wait_set): guest * 4 + one of these, or
// the opener's wake-up pipe.
const TOKEN_LISTENER: u64 = 0;
const TOKEN_PIDFD: u64 = 1;
const TOKEN_STATUS: u64 = 2;
const TOKEN_OPENER: u64 = u64::MAX;
const TOKEN_QOS: u64 = u64::MAX - 1;
const TOKEN_TICK: u64 = u64::MAX - 2;
const TOKEN_KICK: u64 = u64::MAX - 3;

struct Held {
    guest: usize,
    id: u64,
    call: Call,
    until: Instant,
    t0: Instant,
}

/// The executive with its guests started.
pub struct Executive {
    opts: Options,
    setup: Setup,
    started_ms: u64,
    guests: Vec<G>,
    state: Vec<StatLock<GState>>,
    shared: StatLock<Shared>,
    /// Locking::Giant: taken around everything a thread does in the
    /// executive.
    giant: Option<StatLock<()>>,
    /// One per executive thread (Options::cpus, or one).
    runq: Vec<StatLock<RunQueue>>,
    /// Wakes a thread from its wait (run queue changed, the end): read
    /// end, write end.
    kick: Vec<(OwnedFd, OwnedFd)>,
    /// Guests not ended yet.
    alive: AtomicUsize,
    /// The calls whose answer does not touch the shared state may skip
    /// its lock (no boost, no QoS).
    per_call_shared: bool,
}

/// The guests as crate::rpc sees them.
struct GuestPeers<'a>(&'a [G]);

impl Peers for GuestPeers<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn listener(&self, g: usize) -> Option<&Listener> {
        self.0
            .get(g)
            .filter(|x| x.listener_open.load(Relaxed))
            .map(|x| &*x.listener)
    }
}

/// The executive thread that serves guest `k` placed on `cpu` (None: the
/// host places it): the thread of that CPU, else round robin.
fn home_of(cpus: &[usize], k: usize, cpu: Option<usize>) -> usize {
    if cpus.is_empty() {
        return 0;
    }
    cpu.and_then(|c| cpus.iter().position(|&x| x == c))
        .unwrap_or(k % cpus.len())
}

impl Executive {
    /// Starts every guest (each with its own filter and listener).
    pub fn start(
        opts: Options,
        specs: Vec<GuestSpec>,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> Result<Executive, Error> {
        let prepared: Vec<(GuestSpec, Prepared)> = specs
            .into_iter()
            .map(|s| {
                let p = launch::prepare(&s.argv).map_err(|e| Error::Launch {
                    name: s.name.clone(),
                    source: e,
                })?;
                Ok((s, p))
            })
            .collect::<Result<_, Error>>()?;
        let n_guests = prepared.len();
        let mut rpc = Rpc::new(n_guests, std::process::id());
        rpc.set_allowed(prepared.iter().map(|(s, _)| s.rpc_to.clone()).collect());
        let mut dispatch = match &opts.dispatch {
            Some(d) => {
                let params: Vec<_> = prepared.iter().map(|(s, _)| s.sched).collect();
                Some(
                    crate::dispatch::Dispatcher::new(d.clone(), &params).map_err(|e| match e {
                        crate::dispatch::DispatchError::Cgroup(source) => Error::Sys {
                            what:
                                "make the guests' cgroups for dispatching (root and cgroup v2 needed)",
                            source,
                        },
                        crate::dispatch::DispatchError::Partition(p) => {
                            let name = match p {
                                crate::sched::partition::PartitionError::NoRoom {
                                    guest, ..
                                } => prepared.get(guest).map(|(s, _)| s.name.clone()),
                                _ => None,
                            };
                            Error::Launch {
                                name: name.unwrap_or_default(),
                                source: LaunchError::Sys {
                                    what: "give the guest a CPU of the system's",
                                    source: std::io::Error::other(p.to_string()),
                                },
                            }
                        }
                    })?,
                )
            }
            None => None,
        };
        let rates: Vec<Option<crate::qos::Rate>> = prepared.iter().map(|(s, _)| s.qos).collect();
        let qos = if rates.iter().any(Option::is_some) {
            Some(
                crate::qos::Qos::new(opts.qos_period, &rates).map_err(|source| Error::Sys {
                    what: "set up the QoS reader",
                    source,
                })?,
            )
        } else {
            None
        };
        let threads = opts.cpus.len().max(1);
        let mut runq: Vec<RunQueue> = (0..threads).map(|_| RunQueue::default()).collect();
        let mut guests = Vec::new();
        let mut state = Vec::new();
        let mut filters = Vec::new();
        let mut sync_all = true;
        for (k, (spec, p)) in prepared.into_iter().enumerate() {
            let mut chain = Chain::new(spec.agents);
            let wants = chain.wants();
            let mut nrs: Vec<u32> = wants.iter().map(|s| s.0).collect();
            // calls to the executive (crate::rpc), whatever the agents
            nrs.push(rpc::SYS_EXEC);
            if spec.qos.is_some() {
                nrs.extend(crate::qos::Qos::wants());
                nrs.sort_unstable();
                nrs.dedup();
            }
            // on N CPUs, a guest the dispatcher does not place runs on
            // the CPU of the executive thread that serves it
            let own_cpu;
            let (place, home) = match &dispatch {
                Some(d) => (
                    launch::Placement {
                        cgroup_procs: d.procs_fd(k),
                        freezer_procs: d.freezer_procs_fd(k),
                        cpus: d.cpus_of(k),
                    },
                    home_of(&opts.cpus, k, d.cpu_of(k)),
                ),
                None => {
                    let home = home_of(&opts.cpus, k, None);
                    own_cpu = opts.cpus.get(home).map(std::slice::from_ref);
                    (
                        launch::Placement {
                            cgroup_procs: None,
                            freezer_procs: None,
                            cpus: own_cpu.unwrap_or(&[]),
                        },
                        home,
                    )
                }
            };
            let sp =
                launch::spawn(&p, &nrs, &spec.enforce, opts.sync_wake, place).map_err(|e| {
                    Error::Launch {
                        name: spec.name.clone(),
                        source: e,
                    }
                })?;
            // it runs its program only when dispatched
            if let Some(d) = &mut dispatch {
                d.hold(k);
            }
            // its first exec is the launcher's (agents::deny)
            chain.started(sp.pid);
            sync_all &= sp.sync_wake_up;
            filters.push((
                spec.name.clone(),
                wants.iter().map(|s| s.name().into_owned()).collect(),
            ));
            runq[home].guests.push(k);
            guests.push(G {
                agent_names: chain.names(),
                name: spec.name,
                argv: p.argv.clone(),
                pid: sp.pid,
                pidfd: sp.pidfd,
                listener: Arc::new(sp.listener),
                listener_open: AtomicBool::new(true),
                home: AtomicUsize::new(home),
            });
            state.push(StatLock::new(
                "guest",
                rank::GUEST,
                GState {
                    chain,
                    status: Some(sp.status),
                    end: None,
                    stats: wants
                        .iter()
                        .map(|&nr| Stat {
                            nr,
                            count: 0,
                            executive_ns: 0,
                            kernel_ns: 0,
                        })
                        .collect(),
                    vanished: 0,
                    executive_ns: 0,
                    said_enosys: Vec::with_capacity(8),
                },
            ));
        }
        if let Some(d) = &mut dispatch {
            d.start().map_err(|(i, e)| Error::Launch {
                name: guests[i].name.clone(),
                source: LaunchError::Sys {
                    what: "admit the guest to the executive's policy",
                    source: std::io::Error::other(e.to_string()),
                },
            })?;
        }
        // a guest of the same user cannot open our /proc files or ptrace us
        let _ = supervise::set_not_dumpable();
        let opener = perform::start_opener().map_err(|source| Error::Sys {
            what: "start the opener thread",
            source,
        })?;
        // before SCHED_FIFO: the publisher thread stays at normal priority
        let publisher = match &opts.status_dir {
            Some(d) => Some(
                status::Publisher::start(d.clone()).map_err(|source| Error::Sys {
                    what: "start the status thread",
                    source,
                })?,
            ),
            None => None,
        };
        let kick = (0..threads)
            .map(|_| supervise::pipe_nonblock())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|source| Error::Sys {
                what: "make the executive threads' wake-up pipes",
                source,
            })?;
        let timekeeping = keeps_time(
            &opts,
            guests
                .iter()
                .flat_map(|g| g.agent_names.iter().map(String::as_str)),
            qos.is_some(),
        );
        let priority = opts.priority.unwrap_or(if timekeeping { 99 } else { 0 });
        // (the other executive threads inherit the policy at their start)
        let (prio, locked) = if !opts.realtime {
            (
                Err("not asked for".to_string()),
                Err("not asked for".to_string()),
            )
        } else {
            (
                if priority == 0 && opts.priority.is_none() {
                    Err("SCHED_OTHER: no agent keeps time or dispatches (--priority N for SCHED_FIFO N)".to_string())
                } else if priority == 0 {
                    Err("SCHED_OTHER asked for (--priority 0)".to_string())
                } else {
                    supervise::set_fifo(priority).map(|()| priority).map_err(|e| {
                        format!(
                            "SCHED_FIFO {priority} refused ({e}): the executive runs at normal priority"
                        )
                    })
                },
                // with real-time priority only: a SCHED_OTHER executive
                // keeps no time, and locking costs milliseconds at start
                if priority > 0 {
                    supervise::lock_memory().map_err(|e| {
                        format!("mlockall refused ({e}): the executive's memory may be paged")
                    })
                } else {
                    Err("not locked at SCHED_OTHER".to_string())
                },
            )
        };
        // dispatched reservations run real-time below the executive, or
        // not at all real-time if the executive is not (it must preempt
        // them to keep its decisions)
        if let Some(d) = &mut dispatch {
            d.below_executive(prio.as_ref().ok().copied());
        }
        let per_call_shared = opts.boost.is_some() || qos.is_some();
        Ok(Executive {
            setup: Setup {
                fifo_wanted: opts.realtime && priority > 0,
                priority: prio,
                memory_locked: locked,
                sync_wake_up: sync_all && opts.sync_wake,
                filters,
            },
            giant: (opts.locking == Locking::Giant)
                .then(|| StatLock::new("giant", rank::GIANT, ())),
            runq: runq
                .into_iter()
                .map(|q| StatLock::new("runqueue", rank::RUNQUEUE, q))
                .collect(),
            kick,
            alive: AtomicUsize::new(guests.len()),
            shared: StatLock::new(
                "executive",
                rank::SHARED,
                Shared {
                    held: Vec::with_capacity(1024),
                    opener: Some(opener),
                    pending_opens: 0,
                    rpc,
                    exec: Executor::new(crate::kept::KeptTimers::preallocated(64)),
                    dispatch,
                    qos,
                    boosted: Vec::with_capacity(256),
                    publisher,
                    status_dir: opts.status_dir.clone(),
                    log,
                },
            ),
            per_call_shared,
            opts,
            guests,
            state,
            started_ms: status::now_unix_ms(),
        })
    }

    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The guests' first pids.
    pub fn pids(&self) -> Vec<u32> {
        self.guests.iter().map(|g| g.pid).collect()
    }

    fn log(&self, msg: &str) {
        (self.shared.lock().log)(msg);
    }

    /// Giant design: the one lock, taken on entry to the executive.
    fn enter(&self) -> Option<StatGuard<'_, ()>> {
        self.giant.as_ref().map(StatLock::lock)
    }

    /// Serves until every guest's first process has ended; returns how
    /// each ended. One thread per CPU of Options::cpus (this one serves
    /// the first), each pinned to its CPU.
    pub fn run(self) -> Vec<GuestEnd> {
        self.run_with_locks().0
    }

    /// [`Executive::run`], and every lock's statistics at the end
    /// ([`Executive::lock_stats`]; `mantle run --json`'s exit record).
    pub fn run_with_locks(self) -> (Vec<GuestEnd>, Vec<LockStats>) {
        let threads = self.runq.len();
        let mut sets = Vec::with_capacity(threads);
        for t in 0..threads {
            match self.wait_set(t) {
                Ok(s) => sets.push(s),
                Err(e) => {
                    // Nothing can be served: the guests must not run on
                    // unsupervised (the same rule as the executive dying).
                    self.log(&format!(
                        "cannot wait for the guests' calls ({e}): killing them"
                    ));
                    for (g, s) in self.guests.iter().zip(&self.state) {
                        let _ = supervise::kill(g.pid as i32, libc::SIGKILL);
                        let _ = supervise::wait_child(g.pid as i32, true);
                        s.lock().end = Some(End::Killed {
                            signal: libc::SIGKILL,
                            core: false,
                        });
                    }
                    let locks = self.lock_stats();
                    return (self.finish(), locks);
                }
            }
        }
        let mut sets = sets.into_iter();
        let first = sets.next();
        std::thread::scope(|scope| {
            let me = &self;
            let others: Vec<_> = sets
                .enumerate()
                .map(|(k, set)| {
                    std::thread::Builder::new()
                        .name(format!("mantle-exec{}", k + 1))
                        .spawn_scoped(scope, move || me.serve_cpu(k + 1, set))
                })
                .collect();
            if let Some(set) = first {
                self.serve_cpu(0, set);
            }
            for o in others {
                match o {
                    Ok(h) => {
                        let _ = h.join();
                    }
                    Err(e) => self.log(&format!(
                        "cannot start an executive thread ({e}): its guests are not served"
                    )),
                }
            }
        });
        let locks = self.lock_stats();
        (self.finish(), locks)
    }

    /// The wait set of thread `t`: the listener, pidfd and status pipe of
    /// every guest in its run queue, its wake-up pipe, and for thread 0
    /// the opener's wake-up pipe and the QoS reader's epoll set.
    fn wait_set(&self, t: usize) -> std::io::Result<PollSet> {
        // ppoll, not epoll: a poll waiter gets SYNC_WAKE_UP's wake-up on
        // the guest's CPU; epoll's callback drops it (mantle_sys::epoll)
        let mut ep = PollSet::new(3 * self.guests.len() + 4);
        let q = self.runq[t].lock();
        for &i in &q.guests {
            self.add_guest(&mut ep, i)?;
        }
        drop(q);
        ep.add(self.kick[t].0.as_fd(), TOKEN_KICK)?;
        if t == 0 {
            let sh = self.shared.lock();
            if let Some(o) = &sh.opener {
                ep.add(o.wake.as_fd(), TOKEN_OPENER)?;
            }
            if let Some(q) = &sh.qos {
                ep.add(q.fd(), TOKEN_QOS)?;
            }
        }
        Ok(ep)
    }

    fn add_guest(&self, ep: &mut PollSet, i: usize) -> std::io::Result<()> {
        let g = &self.guests[i];
        let base = i as u64 * 4;
        if g.listener_open.load(Relaxed) {
            ep.add(g.listener.as_fd(), base + TOKEN_LISTENER)?;
        }
        let s = self.state[i].lock();
        if s.end.is_none() {
            ep.add(g.pidfd.as_fd(), base + TOKEN_PIDFD)?;
        }
        if let Some(st) = &s.status {
            ep.add(st.as_fd(), base + TOKEN_STATUS)?;
        }
        Ok(())
    }

    fn remove_guest(&self, ep: &mut PollSet, i: usize) {
        let g = &self.guests[i];
        let _ = ep.remove(g.listener.as_fd());
        let _ = ep.remove(g.pidfd.as_fd());
        if let Some(st) = &self.state[i].lock().status {
            let _ = ep.remove(st.as_fd());
        }
    }

    /// The policy moves guest `i` to executive thread `to`: out of its
    /// run queue, into the other (one lock, then the other: the two have
    /// the same rank), and both threads woken to re-register their wait
    /// sets. The guest's threads are pinned to the new CPU.
    fn move_guest(&self, i: usize, to: usize) {
        let from = self.guests[i].home.load(Relaxed);
        if from == to || to >= self.runq.len() {
            return;
        }
        {
            let mut q = self.runq[from].lock();
            q.guests.retain(|&g| g != i);
            q.generation += 1;
        }
        {
            let mut q = self.runq[to].lock();
            q.guests.push(i);
            q.generation += 1;
        }
        self.guests[i].home.store(to, Relaxed);
        supervise::write_wake(self.kick[from].1.as_fd());
        supervise::write_wake(self.kick[to].1.as_fd());
    }

    /// Something due was added (a held call, a timer, a dispatch change):
    /// thread 0 keeps time, and waits with a timeout computed before; on
    /// N CPUs, another thread may have added it, so thread 0 is woken to
    /// compute its timeout again (one wake-up byte; nothing with one
    /// thread).
    fn kick_timekeeper(&self) {
        if self.runq.len() > 1 {
            supervise::write_wake(self.kick[0].1.as_fd());
        }
    }

    /// A guest ended (called once per guest): when it was the last,
    /// every thread is woken to end.
    fn ended(&self) {
        if self.alive.fetch_sub(1, Relaxed) == 1 {
            for (_, w) in &self.kick {
                supervise::write_wake(w.as_fd());
            }
        }
    }

    /// The loop of executive thread `t`.
    fn serve_cpu(&self, t: usize, mut ep: PollSet) {
        // Thread 0 keeps time: when the executive dispatches, it is left
        // where the host puts it. Pinned to a CPU whose dispatched guests
        // run real-time, its freeze and thaw writes waited for kernel
        // work (cgroup freezing, RCU) that those guests starve on that
        // CPU until the real-time cap: measured, 472 deadline misses of
        // ~300 periods with thread 0 on CPU 0 beside EDF guests there;
        // unpinned, the test's bound (at most 3) held in every run.
        let keeps_time_for_dispatch = t == 0 && self.shared.lock().dispatch.is_some();
        if let Some(&cpu) = self.opts.cpus.get(t).filter(|_| !keeps_time_for_dispatch) {
            if let Err(e) = mantle_sys::os::pin_thread(cpu) {
                self.log(&format!(
                    "executive thread {t}: cannot pin to CPU {cpu} ({e}): it runs where the host puts it"
                ));
            }
        }
        // the executive keeps the guests' time: its timed waits end on time
        // (ppoll has no slack at SCHED_FIFO, 50 us at SCHED_OTHER)
        if let Err(e) = supervise::set_timer_slack_ns(1) {
            self.log(&format!("timer slack stays the default ({e})"));
        }
        // The 100 ms duties (publish, sweeps) of thread 0 wake its loop
        // through a timerfd, so that a wait with nothing due has no
        // timeout: a ppoll timeout arms an hrtimer at every wait, ~0.3 us
        // per notification round trip on the reference VM
        // (mantle_sys::timerfd).
        let tick = Duration::from_millis(100);
        let ticker = if t == 0 {
            mantle_sys::timerfd::Tick::new(tick)
                .and_then(|tk| ep.add(tk.as_fd(), TOKEN_TICK).map(|()| tk))
                .ok()
        } else {
            None
        };
        let mut ready: Vec<Ready> = Vec::with_capacity(3 * self.guests.len() + 4);
        let mut mine: Vec<usize> = Vec::with_capacity(self.guests.len());
        let mut generation = {
            let q = self.runq[t].lock();
            mine.extend(&q.guests);
            q.generation
        };
        let mut last_publish = Instant::now() - Duration::from_secs(1);
        let mut forwarded_stop = false;
        // the next wait's timeout: only thread 0 keeps time; computed at
        // the end of each pass, inside it (one giant hold per pass)
        let timeout_of = |due: Option<Instant>| match due {
            None if ticker.is_some() => None,
            None => Some(tick),
            Some(until) => Some(
                until
                    .saturating_duration_since(Instant::now())
                    .saturating_sub(self.opts.spin_before)
                    .min(tick),
            ),
        };
        let mut timeout = None;
        if t == 0 {
            self.publish();
            timeout = timeout_of(self.shared.lock().next_due());
        }
        loop {
            // (an open still pending on the opener thread, e.g. of a FIFO
            // nobody opens, is abandoned: its caller is killed by the reaper)
            if self.alive.load(Relaxed) == 0 {
                break;
            }
            ready.clear();
            let mut ticked = false;
            match ep.wait_for(timeout) {
                Ok(r) => ready.extend(r),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            let _giant = self.enter();
            if t == 0 && supervise::term_requested() != 0 && !forwarded_stop {
                forwarded_stop = true;
                for (g, s) in self.guests.iter().zip(&self.state) {
                    if s.lock().end.is_none() {
                        let _ = supervise::kill(g.pid as i32, libc::SIGTERM);
                    }
                }
            }
            {
                // held while this batch is served: a guest is in one run
                // queue at a time, so one thread serves it at a time
                let q = self.runq[t].lock();
                if q.generation != generation {
                    generation = q.generation;
                    for &i in &mine {
                        if !q.guests.contains(&i) {
                            self.remove_guest(&mut ep, i);
                        }
                    }
                    for &i in &q.guests {
                        if !mine.contains(&i) {
                            let _ = self.add_guest(&mut ep, i);
                        }
                    }
                    mine.clear();
                    mine.extend(&q.guests);
                }
                for r in &ready {
                    match r.token {
                        TOKEN_KICK => {
                            supervise::drain(self.kick[t].0.as_fd());
                            continue;
                        }
                        TOKEN_OPENER => {
                            self.opens_done();
                            continue;
                        }
                        TOKEN_QOS => {
                            self.shared.lock().serve_qos(&self.guests, self.opts.boost);
                            continue;
                        }
                        TOKEN_TICK => {
                            if let Some(tk) = &ticker {
                                ticked |= tk.take() > 0;
                            }
                            continue;
                        }
                        _ => {}
                    }
                    let i = (r.token / 4) as usize;
                    if !q.guests.contains(&i) {
                        continue; // moved away: its new thread serves it
                    }
                    self.ready(&mut ep, i, r);
                }
            }
            if t != 0 {
                continue;
            }
            // one shared hold when nothing is kept: no timer, held call,
            // dispatcher or QoS reader
            let keeps = {
                let sh = self.shared.lock();
                !(sh.exec.timers.is_empty()
                    && sh.held.is_empty()
                    && sh.dispatch.is_none()
                    && sh.qos.is_none())
            };
            if keeps {
                self.duties();
            }
            // with the timerfd, its tick says when (no clock read per call)
            if (ticker.is_some() && ticked) || (ticker.is_none() && last_publish.elapsed() >= tick)
            {
                self.shared.lock().rpc.sweep(&GuestPeers(&self.guests));
                self.publish();
                last_publish = Instant::now();
            }
            timeout = if keeps {
                timeout_of(self.shared.lock().next_due())
            } else {
                timeout_of(None)
            };
        }
    }

    /// Thread 0's timed duties: timers, held calls, QoS, dispatching, and
    /// the moves of guests the dispatcher placed elsewhere.
    fn duties(&self) {
        {
            self.spin_to_due();
            self.fire_timers();
            self.expire_held();
            let moves = {
                let mut sh = self.shared.lock();
                let sh = &mut *sh;
                if let Some(q) = &mut sh.qos {
                    if q.next_due().is_some_and(|t| t <= Instant::now()) {
                        sh.serve_qos(&self.guests, self.opts.boost);
                    }
                }
                match &mut sh.dispatch {
                    Some(d) => {
                        d.tick();
                        self.policy_moves(d)
                    }
                    None => 0,
                }
            };
            if moves > 0 {
                self.rebalance();
            }
        }
    }

    /// How many guests the dispatcher placed on a CPU other than the one
    /// of the thread that serves them.
    fn policy_moves(&self, d: &crate::dispatch::Dispatcher) -> usize {
        if self.runq.len() < 2 {
            return 0;
        }
        (0..self.guests.len())
            .filter(|&i| {
                d.cpu_of(i).is_some_and(|c| {
                    home_of(&self.opts.cpus, i, Some(c)) != self.guests[i].home.load(Relaxed)
                })
            })
            .count()
    }

    /// Moves each guest to the thread of the CPU the dispatcher placed it
    /// on (a guest does not migrate unless the policy moves it).
    fn rebalance(&self) {
        let placed: Vec<Option<usize>> = {
            let sh = self.shared.lock();
            let Some(d) = &sh.dispatch else { return };
            (0..self.guests.len()).map(|i| d.cpu_of(i)).collect()
        };
        for (i, c) in placed.into_iter().enumerate() {
            if let Some(c) = c {
                self.move_guest(i, home_of(&self.opts.cpus, i, Some(c)));
            }
        }
    }

    /// One ready fd of guest `i` (its thread holds its run queue).
    fn ready(&self, ep: &mut PollSet, i: usize, r: &Ready) {
        let g = &self.guests[i];
        match r.token % 4 {
            TOKEN_LISTENER => {
                if r.events & libc::EPOLLIN as u32 != 0 {
                    self.serve(i);
                } else if r.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                    // no task uses the filter any more
                    g.listener_open.store(false, Relaxed);
                    let _ = ep.remove(g.listener.as_fd());
                    self.shared.lock().rpc.sweep(&GuestPeers(&self.guests));
                }
            }
            TOKEN_PIDFD => {
                if self.reap(i) {
                    let _ = ep.remove(g.pidfd.as_fd());
                }
            }
            _ => {
                let mut s = self.state[i].lock();
                if let Some(st) = s.status.take() {
                    let _ = ep.remove(st.as_fd());
                    if let Some((step, errno)) = launch::read_status(&st) {
                        // (its pidfd may have been served first: ended once)
                        let first = s.end.is_none();
                        s.end = Some(End::NotStarted {
                            step: launch::step_name(step),
                            errno,
                        });
                        drop(s);
                        if first {
                            self.ended();
                        }
                        let _ = supervise::wait_child(g.pid as i32, true);
                        let _ = ep.remove(g.pidfd.as_fd());
                    }
                }
            }
        }
    }

    /// Answers what is still held and says how each guest ended.
    fn finish(self) -> Vec<GuestEnd> {
        let mut sh = self.shared.lock();
        if let (Some(d), true) = (&sh.dispatch, self.opts.verbose) {
            let msg = format!("dispatch: {}", d.summary());
            let trace = d.trace().to_vec();
            (sh.log)(&msg);
            for l in trace {
                (sh.log)(&format!("dispatch trace: {l}"));
            }
        }
        // held calls of ended guests: answer them (their callers may live on)
        sh.rpc.drain(&GuestPeers(&self.guests));
        let held = std::mem::take(&mut sh.held);
        let publisher = sh.publisher.take();
        drop(sh);
        for h in held {
            if self.guests[h.guest]
                .listener
                .reply_error(h.id, libc::EINTR)
                .is_err()
            {
                self.state[h.guest].lock().vanished += 1;
            }
        }
        if let Some(p) = publisher {
            let _ = p.finish(); // its last write done before the file goes
        }
        if let Some(d) = &self.opts.status_dir {
            status::unpublish(d, std::process::id());
        }
        self.guests
            .iter()
            .zip(&self.state)
            .map(|(g, s)| {
                let s = s.lock();
                GuestEnd {
                    name: g.name.clone(),
                    pid: g.pid,
                    end: s.end.clone().unwrap_or(End::Exited(0)),
                    vanished: s.vanished,
                    calls: s
                        .stats
                        .iter()
                        .map(|st| (st.nr.name().into_owned(), st.count))
                        .collect(),
                }
            })
            .collect()
    }

    /// Guest `i`'s pidfd is readable: true when it has ended.
    fn reap(&self, i: usize) -> bool {
        let g = &self.guests[i];
        let mut s = self.state[i].lock();
        if let Ok(Some(w)) = supervise::wait_child(g.pid as i32, false) {
            let end = match (w.code, w.signal) {
                (Some(c), _) => End::Exited(c),
                (_, Some(sig)) => End::Killed {
                    signal: sig,
                    core: w.core,
                },
                _ => End::Exited(0),
            };
            let first = s.end.is_none();
            s.end = Some(end.clone());
            let mut sh = self.shared.lock();
            if let Some(d) = &mut sh.dispatch {
                d.exit(i);
            }
            if let Some(q) = &mut sh.qos {
                q.exit(i);
            }
            // like a shell, quiet about the signals a user or a pipe sends
            if let End::Killed { signal, core } = end {
                if signal != libc::SIGINT && signal != libc::SIGPIPE {
                    let msg = format!(
                        "guest {} (pid {}) killed by {}{}",
                        g.name,
                        g.pid,
                        signal_name(signal),
                        if core { " (core dumped)" } else { "" }
                    );
                    (sh.log)(&msg);
                }
            }
            drop(sh);
            drop(s);
            if first {
                self.ended();
            }
            return true;
        }
        s.end.is_some()
    }

    /// One notification of guest `i`.
    fn serve(&self, i: usize) {
        let g = &self.guests[i];
        let n = match g.listener.recv() {
            Ok(n) => n,
            Err(e) => {
                if e.errno() == Some(libc::ENOENT) {
                    self.state[i].lock().vanished += 1;
                }
                return;
            }
        };
        if n.data.nr as u32 == rpc::SYS_EXEC && n.data.arch == mantle_sys::seccomp::AUDIT_ARCH {
            // a call to the executive: answered here, never by agents
            self.shared
                .lock()
                .rpc
                .handle(&GuestPeers(&self.guests), i, n.id, n.pid, n.data.args);
            return;
        }
        // The receipt, then t0, both CLOCK_MONOTONIC (std's Instant is),
        // read one after the other: a held call is released at t0 + d, and
        // an agent counts d from the receipt (an absolute sleep: its time
        // minus the receipt), so t0 must not be read before the receipt.
        // It was (issue 29): the unboost below sat between the two, and an
        // absolute sleep under --boost/--extended came back early by that
        // much (up to 89 us when the executive was interrupted there).
        let received_ns = mantle_sys::os::monotonic_ns();
        let t0 = Instant::now();
        if self.per_call_shared {
            let mut sh = self.shared.lock();
            sh.unboost(n.pid);
            if sh.qos.as_ref().is_some_and(|q| q.has(i))
                && crate::qos::Qos::wants().contains(&(n.data.nr as u32))
                && n.data.arch == mantle_sys::seccomp::AUDIT_ARCH
            {
                let taken = sh.qos.as_mut().is_some_and(|q| {
                    q.take(i, n.id, n.pid, n.data.nr as u32, &n.data.args)
                        .is_ok()
                });
                if taken {
                    sh.serve_qos(&self.guests, self.opts.boost);
                    return;
                }
            }
        }
        let Some(call) = protected::call_of(&n, received_ns) else {
            let _ = g.listener.reply_error(n.id, libc::ENOSYS);
            return;
        };
        self.decide(i, n.id, call, t0);
    }

    /// Decides and answers guest `i`'s call under its lock; the shared
    /// lock only for decisions that need it (not Continue, Fail, Return).
    fn decide(&self, i: usize, id: u64, call: Call, t0: Instant) {
        let g = &self.guests[i];
        let listener = &g.listener;
        let mut st = self.state[i].lock();
        let d = {
            let mut pg = ProtectedGuest {
                listener,
                id,
                tid: call.tid,
            };
            Executor::decide(&mut st.chain, &call, &mut pg)
        };
        let gpid = g.pid;
        let kernel_ns = 0;
        let mut shared = None;
        let action = match Executor::answer_now(&d) {
            Some(a) => a,
            None => {
                let sh = shared.insert(self.shared.lock());
                let sh = &mut **sh;
                let sched = sh.dispatch.as_mut().map(|d| (d, i));
                sh.exec.carry_out(&d, &call, t0, gpid, sched)
            }
        };
        let sent = match action {
            Action::Continue => listener.reply_continue(id).map(|()| Outcome::Unseen),
            Action::Fail(e) => listener
                .reply_error(id, e)
                .map(|()| Outcome::Result(-i64::from(e))),
            Action::Return(v) => listener.reply(id, v).map(|()| Outcome::Result(v)),
            Action::Hold(until) => {
                let sh = shared.get_or_insert_with(|| self.shared.lock());
                sh.held.push(Held {
                    guest: i,
                    id,
                    call,
                    until,
                    t0,
                });
                drop(shared);
                self.kick_timekeeper();
                return;
            }
            Action::Perform(p) => {
                if let Some((dirfd, addr, flags, mode, path_arg)) =
                    perform::open_args(&p.nr.name(), &p.args)
                {
                    let path = match &p.path {
                        Some((idx, bytes)) if *idx == path_arg => Ok(bytes.clone()),
                        Some(_) => Err(libc::EINVAL),
                        None => {
                            let mut pg = ProtectedGuest {
                                listener,
                                id,
                                tid: call.tid,
                            };
                            crate::agent::Guest::read_cstr(&mut pg, addr, libc::PATH_MAX as usize)
                                .map_err(|e| match e {
                                    crate::agent::GuestError::TooLong { .. } => libc::ENAMETOOLONG,
                                    _ => libc::EFAULT,
                                })
                        }
                    };
                    match path.and_then(|b| std::ffi::CString::new(b).map_err(|_| libc::EINVAL)) {
                        Ok(path) => {
                            let sh = shared.get_or_insert_with(|| self.shared.lock());
                            let sh = &mut **sh;
                            if let Some(o) = &sh.opener {
                                let req = OpenRequest {
                                    guest: i,
                                    id,
                                    call,
                                    decision: d.clone(),
                                    listener: Arc::clone(listener),
                                    dirfd,
                                    path,
                                    flags,
                                    mode,
                                    t0,
                                };
                                if o.tx.send(req).is_ok() {
                                    sh.pending_opens += 1;
                                    return;
                                }
                            }
                            listener
                                .reply_error(id, libc::EIO)
                                .map(|()| Outcome::Result(-5))
                        }
                        Err(e) => listener
                            .reply_error(id, e)
                            .map(|()| Outcome::Result(-i64::from(e))),
                    }
                } else {
                    if !st.said_enosys.contains(&p.nr) {
                        st.said_enosys.push(p.nr);
                        let msg = format!(
                            "guest {}: performing {} on a guest's behalf is not supported on the protected path: answered ENOSYS",
                            g.name,
                            p.nr.name()
                        );
                        let sh = shared.get_or_insert_with(|| self.shared.lock());
                        (sh.log)(&msg);
                    }
                    listener
                        .reply_error(id, libc::ENOSYS)
                        .map(|()| Outcome::Result(-i64::from(libc::ENOSYS)))
                }
            }
        };
        if shared.is_some() {
            // a timer armed, a dispatch change: thread 0's next deadline
            drop(shared);
            self.kick_timekeeper();
        }
        let outcome = match sent {
            Ok(o) => o,
            Err(_) => {
                // ENOENT: the call vanished (killed, interrupted)
                st.vanished += 1;
                Outcome::Result(-i64::from(libc::ENOENT))
            }
        };
        let t = Times {
            executive_ns: (t0.elapsed().as_nanos() as u64).saturating_sub(kernel_ns),
            kernel_ns,
        };
        st.chain.after(&call, &d, outcome, t);
        st.executive_ns += t.executive_ns;
        if let Some(s) = st.stat(call.nr) {
            s.count += 1;
            s.executive_ns += t.executive_ns;
            s.kernel_ns += t.kernel_ns;
        }
    }

    fn opens_done(&self) {
        let done: Vec<perform::OpenDone> = {
            let mut sh = self.shared.lock();
            let sh = &mut *sh;
            let Some(o) = &sh.opener else { return };
            supervise::drain(o.wake.as_fd());
            let done: Vec<_> = o.rx.try_iter().collect();
            sh.pending_opens = sh.pending_opens.saturating_sub(done.len());
            done
        };
        for d in done {
            let Some(s) = self.state.get(d.guest) else {
                continue;
            };
            let mut g = s.lock();
            if d.vanished {
                g.vanished += 1;
            }
            let t = Times {
                executive_ns: (d.t0.elapsed().as_nanos() as u64).saturating_sub(d.kernel_ns),
                kernel_ns: d.kernel_ns,
            };
            g.chain
                .after(&d.call, &d.decision, Outcome::Result(d.result), t);
            g.executive_ns += t.executive_ns;
            if let Some(s) = g.stat(d.call.nr) {
                s.count += 1;
                s.executive_ns += t.executive_ns;
                s.kernel_ns += t.kernel_ns;
            }
        }
    }

    /// Extended mode: busy-waits to the next held call's time if it is
    /// within `spin_before` (nothing else is served meanwhile by this
    /// thread: a bounded stretch, documented as the mode's cost).
    fn spin_to_due(&self) {
        if self.opts.spin_before.is_zero() {
            return;
        }
        let Some(due) = self.shared.lock().next_due() else {
            return;
        };
        if due.saturating_duration_since(Instant::now()) <= self.opts.spin_before {
            while Instant::now() < due {
                std::hint::spin_loop();
            }
        }
    }

    /// Sends the signals of the timers that are due (at the executive's
    /// priority: their delivery does not wait for the guests' CPU share).
    fn fire_timers(&self) {
        let mut sh = self.shared.lock();
        if sh.exec.timers.is_empty() {
            return; // no clock read per call for nothing
        }
        // out of the shared state while it fires, so that each signalled
        // thread can be boosted at once (an empty table allocates nothing)
        let mut timers = std::mem::replace(&mut sh.exec.timers, crate::kept::KeptTimers::lazy(0));
        let boost = self.opts.boost;
        timers.fire(Instant::now(), |tid| sh.boost(tid, boost));
        sh.exec.timers = timers;
    }

    fn expire_held(&self) {
        let due: Vec<Held> = {
            let mut sh = self.shared.lock();
            if sh.held.is_empty() {
                return; // no clock read per call for nothing
            }
            let now = Instant::now();
            let mut due = Vec::new();
            let mut k = 0;
            while k < sh.held.len() {
                if sh.held[k].until <= now {
                    due.push(sh.held.swap_remove(k));
                } else {
                    k += 1;
                }
            }
            due
        };
        for h in due {
            if self.guests[h.guest]
                .listener
                .id_valid(h.id)
                .unwrap_or(false)
            {
                {
                    // released: boosted before its answer wakes it
                    let mut sh = self.shared.lock();
                    sh.boost(h.call.tid, self.opts.boost);
                    if let Some(d) = &mut sh.dispatch {
                        d.poke(h.guest);
                    }
                }
                self.decide(h.guest, h.id, h.call, h.t0);
            } else {
                self.state[h.guest].lock().vanished += 1;
            }
        }
    }

    /// Offers a snapshot to the publisher thread (skipped while it still
    /// writes the previous one).
    fn publish(&self) {
        {
            let mut sh = self.shared.lock();
            let Some(p) = &sh.publisher else {
                return;
            };
            if p.failed() {
                if let Some(e) = sh.publisher.take().and_then(|p| p.finish()) {
                    let dir = sh.status_dir.take().unwrap_or_default();
                    let msg = format!("cannot publish the status in {}: {e}", dir.display());
                    (sh.log)(&msg);
                }
                return;
            }
        }
        let s = self.status();
        if let Some(p) = &self.shared.lock().publisher {
            p.offer(s);
        }
    }

    /// Every lock's statistics so far (`mantle exec status --locks`),
    /// named by what it guards: giant, runqueue cpuN, executive, guest
    /// NAME.
    pub fn lock_stats(&self) -> Vec<LockStats> {
        let mut out = Vec::new();
        if let Some(g) = &self.giant {
            out.push(g.stats());
        }
        for (t, q) in self.runq.iter().enumerate() {
            let mut s = q.stats();
            s.name = match self.opts.cpus.get(t) {
                Some(c) => format!("runqueue cpu{c}"),
                None => "runqueue".into(),
            };
            out.push(s);
        }
        out.push(self.shared.stats());
        for (g, s) in self.guests.iter().zip(&self.state) {
            let mut st = s.stats();
            st.name = format!("guest {}", g.name);
            out.push(st);
        }
        out
    }

    /// The status as `exec status` shows it. Takes each lock in turn,
    /// never two of the same rank.
    pub fn status(&self) -> ExecStatus {
        let n = self.guests.len();
        let (held, sched, dispatched, cpu): (Vec<u64>, Vec<_>, Vec<u64>, Vec<_>) = {
            let sh = self.shared.lock();
            let held = (0..n)
                .map(|i| sh.held.iter().filter(|h| h.guest == i).count() as u64 + sh.rpc.held_by(i))
                .collect();
            let d = sh.dispatch.as_ref();
            (
                held,
                (0..n).map(|i| d.and_then(|d| d.params(i))).collect(),
                (0..n)
                    .map(|i| d.map_or(0, |d| d.stats.ran_ns.get(i).copied().unwrap_or(0)))
                    .collect(),
                (0..n).map(|i| d.and_then(|d| d.cpu_of(i))).collect(),
            )
        };
        ExecStatus {
            schema: status::SCHEMA.into(),
            pid: std::process::id(),
            uid: mantle_sys::os::geteuid(),
            path: "protected".into(),
            priority: self.setup.priority.as_ref().ok().copied(),
            memory_locked: self.setup.memory_locked.is_ok(),
            sync_wake_up: self.setup.sync_wake_up,
            fail_open: self.opts.fail_open,
            started_unix_ms: self.started_ms,
            updated_unix_ms: status::now_unix_ms(),
            locking: Some(self.opts.locking.name().into()),
            executive_cpus: self.opts.cpus.clone(),
            locks: self.lock_stats(),
            guests: self
                .guests
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let s = self.state[i].lock();
                    GuestStatus {
                        name: g.name.clone(),
                        pid: g.pid,
                        command: g.argv.clone(),
                        state: match &s.end {
                            None if s.status.is_some() => "starting",
                            None => "running",
                            Some(End::Exited(_)) => "exited",
                            Some(End::Killed { .. }) => "killed",
                            Some(End::NotStarted { .. }) => "not-started",
                        }
                        .into(),
                        exit_code: match s.end {
                            Some(End::Exited(c)) => Some(c),
                            _ => None,
                        },
                        signal: match s.end {
                            Some(End::Killed { signal, .. }) => Some(signal),
                            _ => None,
                        },
                        agents: g.agent_names.clone(),
                        calls: s
                            .stats
                            .iter()
                            .map(|st| CallStat {
                                name: st.nr.name().into_owned(),
                                count: st.count,
                                executive_ns: st.executive_ns,
                                kernel_ns: st.kernel_ns,
                            })
                            .collect(),
                        vanished: s.vanished,
                        held: held[i],
                        executive_ns: s.executive_ns,
                        sched: sched[i],
                        dispatched_ns: dispatched[i],
                        cpu: cpu[i],
                        executive_thread: Some(g.home.load(Relaxed)),
                    }
                })
                .collect(),
        }
    }
}

impl Shared {
    /// The next instant something is due: a held call or a timer.
    fn next_due(&self) -> Option<Instant> {
        let held = self.held.iter().map(|h| h.until);
        let dispatch = self.dispatch.as_ref().and_then(|d| d.next_due());
        let qos = self.qos.as_ref().and_then(|q| q.next_due());
        held.chain(self.exec.timers.next_due())
            .chain(dispatch)
            .chain(qos)
            .min()
    }

    /// Serves the held reads the QoS reader may serve now. A reserved
    /// guest whose read was answered runs next: at SCHED_FIFO (`--boost`,
    /// default 1) until its next interposed call.
    fn serve_qos(&mut self, guests: &[G], boost: Option<i32>) {
        let mut served = [0u32; 16];
        let mut n = 0;
        if let Some(q) = &mut self.qos {
            q.serve(
                |g| {
                    guests
                        .get(g)
                        .filter(|x| x.listener_open.load(Relaxed))
                        .map(|x| &*x.listener)
                },
                |tid| {
                    if n < served.len() {
                        served[n] = tid;
                        n += 1;
                    }
                },
            );
        }
        let prio = boost.unwrap_or(1);
        for &tid in &served[..n] {
            if !self.boosted.contains(&tid)
                && self.boosted.len() < self.boosted.capacity()
                && supervise::set_fifo_of(tid, prio).is_ok()
            {
                self.boosted.push(tid);
            }
        }
    }

    fn boost(&mut self, tid: u32, boost: Option<i32>) {
        let Some(p) = boost else { return };
        if self.dispatch.is_some() {
            // the dispatcher gives the guests' threads their host class
            // (crate::dispatch): a released thread of a guest not
            // dispatched must not run, one of the dispatched guest runs
            // at its class already
            return;
        }
        if self.boosted.contains(&tid) || self.boosted.len() == self.boosted.capacity() {
            return;
        }
        // a thread at a real-time policy of its own (cyclictest's FIFO 80)
        // keeps it: a boost never lowers it, its next call never ends it
        if !supervise::is_realtime(tid) && supervise::set_fifo_of(tid, p).is_ok() {
            self.boosted.push(tid);
        }
    }

    /// A boosted thread made its next interposed call: normal again.
    fn unboost(&mut self, tid: u32) {
        if let Some(k) = self.boosted.iter().position(|&t| t == tid) {
            self.boosted.swap_remove(k);
            let _ = supervise::set_other_of(tid);
        }
    }
}

/// SIGSEGV, SIGKILL... or "signal N" ([`crate::agents::decode::signal_name`]).
pub fn signal_name(sig: i32) -> String {
    crate::agents::decode::signal_name(sig).unwrap_or_else(|| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_go_to_the_thread_of_their_cpu_else_round_robin() {
        assert_eq!(home_of(&[], 3, Some(1)), 0);
        assert_eq!(home_of(&[2, 5], 0, None), 0);
        assert_eq!(home_of(&[2, 5], 1, None), 1);
        assert_eq!(home_of(&[2, 5], 2, None), 0);
        assert_eq!(home_of(&[2, 5], 0, Some(5)), 1);
        // placed on a CPU the executive has no thread on: round robin
        assert_eq!(home_of(&[2, 5], 1, Some(7)), 1);
    }

    #[test]
    fn the_executive_can_be_shared_by_its_threads() {
        fn sync<T: Sync + Send>() {}
        sync::<Executive>();
    }
}

//! The executive: one thread that serves every guest's interposed calls on
//! the protected path, holds calls it was asked to delay, notices guests
//! ending, and publishes its status.
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

struct G {
    name: String,
    argv: Vec<String>,
    pid: u32,
    pidfd: OwnedFd,
    listener: Arc<Listener>,
    listener_open: bool,
    chain: Chain,
    agent_names: Vec<String>,
    status: Option<OwnedFd>,
    end: Option<End>,
    stats: Vec<Stat>,
    vanished: u64,
    executive_ns: u64,
    said_enosys: Vec<Sysno>,
}

impl G {
    fn stat(&mut self, nr: Sysno) -> Option<&mut Stat> {
        self.stats.iter_mut().find(|s| s.nr == nr)
    }
}

// What a ready fd is (Executive::wait_set): guest * 4 + one of these, or
// the opener's wake-up pipe.
const TOKEN_LISTENER: u64 = 0;
const TOKEN_PIDFD: u64 = 1;
const TOKEN_STATUS: u64 = 2;
const TOKEN_OPENER: u64 = u64::MAX;
const TOKEN_QOS: u64 = u64::MAX - 1;
const TOKEN_TICK: u64 = u64::MAX - 2;

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
    guests: Vec<G>,
    held: Vec<Held>,
    opener: Option<Opener>,
    setup: Setup,
    started_ms: u64,
    log: Box<dyn FnMut(&str)>,
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
            .filter(|x| x.listener_open)
            .map(|x| &*x.listener)
    }
}

impl Executive {
    /// Starts every guest (each with its own filter and listener).
    pub fn start(
        opts: Options,
        specs: Vec<GuestSpec>,
        log: Box<dyn FnMut(&str)>,
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
        let mut guests = Vec::new();
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
            let place = match &dispatch {
                Some(d) => launch::Placement {
                    cgroup_procs: d.procs_fd(k),
                    cpus: d.cpus_of(k),
                },
                None => launch::Placement::default(),
            };
            let sp =
                launch::spawn(&p, &nrs, &spec.enforce, opts.sync_wake, place).map_err(|e| {
                    Error::Launch {
                        name: spec.name.clone(),
                        source: e,
                    }
                })?;
            // its first exec is the launcher's (agents::deny)
            chain.started(sp.pid);
            sync_all &= sp.sync_wake_up;
            filters.push((
                spec.name.clone(),
                wants.iter().map(|s| s.name().into_owned()).collect(),
            ));
            guests.push(G {
                agent_names: chain.names(),
                name: spec.name,
                argv: p.argv.clone(),
                pid: sp.pid,
                pidfd: sp.pidfd,
                listener: Arc::new(sp.listener),
                listener_open: true,
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
            });
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
        let timekeeping = keeps_time(
            &opts,
            guests
                .iter()
                .flat_map(|g| g.agent_names.iter().map(String::as_str)),
            qos.is_some(),
        );
        let priority = opts.priority.unwrap_or(if timekeeping { 99 } else { 0 });
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
        Ok(Executive {
            setup: Setup {
                fifo_wanted: opts.realtime && priority > 0,
                priority: prio,
                memory_locked: locked,
                sync_wake_up: sync_all && opts.sync_wake,
                filters,
            },
            opts,
            guests,
            held: Vec::with_capacity(1024),
            opener: Some(opener),
            started_ms: status::now_unix_ms(),
            log,
            pending_opens: 0,
            rpc,
            boosted: Vec::with_capacity(256),
            exec: Executor::new(crate::kept::KeptTimers::preallocated(64)),
            dispatch,
            qos,
            publisher,
        })
    }

    pub fn setup(&self) -> &Setup {
        &self.setup
    }

    /// The guests' first pids.
    pub fn pids(&self) -> Vec<u32> {
        self.guests.iter().map(|g| g.pid).collect()
    }

    /// Serves until every guest's first process has ended; returns how
    /// each ended.
    pub fn run(mut self) -> Vec<GuestEnd> {
        // the executive keeps the guests' time: its timed waits end on time
        // (ppoll has no slack at SCHED_FIFO, 50 us at SCHED_OTHER)
        if let Err(e) = supervise::set_timer_slack_ns(1) {
            (self.log)(&format!("timer slack stays the default ({e})"));
        }
        // Every fd is registered once; a guest's entries leave the set when
        // they end (its listener hangs up, its pidfd becomes readable for
        // good, its status pipe is read). Tokens: guest * 4 + kind.
        let mut ep = match self.wait_set() {
            Ok(ep) => ep,
            Err(e) => {
                // Nothing can be served: the guests must not run on
                // unsupervised (the same rule as the executive dying).
                (self.log)(&format!(
                    "cannot wait for the guests' calls ({e}): killing them"
                ));
                for g in &mut self.guests {
                    let _ = supervise::kill(g.pid as i32, libc::SIGKILL);
                    let _ = supervise::wait_child(g.pid as i32, true);
                    g.end = Some(End::Killed {
                        signal: libc::SIGKILL,
                        core: false,
                    });
                }
                return self.finish();
            }
        };
        // The 100 ms duties (publish, sweeps) wake the loop through a
        // timerfd, so that a wait with nothing due has no timeout: a
        // ppoll timeout arms an hrtimer at every wait, ~0.3 us per
        // notification round trip on the reference VM (mantle_sys::timerfd).
        let tick = Duration::from_millis(100);
        let ticker = mantle_sys::timerfd::Tick::new(tick)
            .and_then(|t| ep.add(t.as_fd(), TOKEN_TICK).map(|()| t))
            .ok();
        let mut ready: Vec<Ready> = Vec::with_capacity(3 * self.guests.len() + 2);
        let mut last_publish = Instant::now() - Duration::from_secs(1);
        let mut forwarded_stop = false;
        self.publish();
        loop {
            // (an open still pending on the opener thread, e.g. of a FIFO
            // nobody opens, is abandoned: its caller is killed by the reaper)
            if self.guests.iter().all(|g| g.end.is_some()) {
                break;
            }
            let timeout = match self.next_due() {
                None if ticker.is_some() => None,
                None => Some(tick),
                Some(until) => Some(
                    until
                        .saturating_duration_since(Instant::now())
                        .saturating_sub(self.opts.spin_before)
                        .min(tick),
                ),
            };
            ready.clear();
            let mut ticked = false;
            match ep.wait_for(timeout) {
                Ok(r) => ready.extend(r),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            if supervise::term_requested() != 0 && !forwarded_stop {
                forwarded_stop = true;
                for g in self.guests.iter().filter(|g| g.end.is_none()) {
                    let _ = supervise::kill(g.pid as i32, libc::SIGTERM);
                }
            }
            for r in &ready {
                if r.token == TOKEN_OPENER {
                    self.opens_done();
                    continue;
                }
                if r.token == TOKEN_QOS {
                    self.serve_qos();
                    continue;
                }
                if r.token == TOKEN_TICK {
                    if let Some(t) = &ticker {
                        ticked |= t.take() > 0;
                    }
                    continue;
                }
                let i = (r.token / 4) as usize;
                match r.token % 4 {
                    TOKEN_LISTENER => {
                        if r.events & libc::EPOLLIN as u32 != 0 {
                            self.serve(i);
                        } else if r.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                            // no task uses the filter any more
                            let g = &mut self.guests[i];
                            g.listener_open = false;
                            let _ = ep.remove(g.listener.as_fd());
                            self.rpc.sweep(&GuestPeers(&self.guests));
                        }
                    }
                    TOKEN_PIDFD => {
                        self.reap(i);
                        let g = &self.guests[i];
                        if g.end.is_some() {
                            let _ = ep.remove(g.pidfd.as_fd());
                        }
                    }
                    _ => {
                        let g = &mut self.guests[i];
                        if let Some(s) = g.status.take() {
                            let _ = ep.remove(s.as_fd());
                            if let Some((step, errno)) = launch::read_status(&s) {
                                g.end = Some(End::NotStarted {
                                    step: launch::step_name(step),
                                    errno,
                                });
                                let _ = supervise::wait_child(g.pid as i32, true);
                                let _ = ep.remove(g.pidfd.as_fd());
                            }
                        }
                    }
                }
            }
            self.spin_to_due();
            self.fire_timers();
            self.expire_held();
            if let Some(d) = &mut self.dispatch {
                d.tick();
            }
            if self
                .qos
                .as_ref()
                .and_then(|q| q.next_due())
                .is_some_and(|t| t <= Instant::now())
            {
                self.serve_qos();
            }
            // with the timerfd, its tick says when (no clock read per call)
            if (ticker.is_some() && ticked) || (ticker.is_none() && last_publish.elapsed() >= tick)
            {
                self.rpc.sweep(&GuestPeers(&self.guests));
                self.publish();
                last_publish = Instant::now();
            }
        }
        self.finish()
    }

    /// Answers what is still held and says how each guest ended.
    fn finish(mut self) -> Vec<GuestEnd> {
        if let (Some(d), true) = (&self.dispatch, self.opts.verbose) {
            let msg = format!("dispatch: {}", d.summary());
            (self.log)(&msg);
        }
        // held calls of ended guests: answer them (their callers may live on)
        self.rpc.drain(&GuestPeers(&self.guests));
        let held = std::mem::take(&mut self.held);
        for h in held {
            let g = &mut self.guests[h.guest];
            if g.listener.reply_error(h.id, libc::EINTR).is_err() {
                g.vanished += 1;
            }
        }
        if let Some(p) = self.publisher.take() {
            let _ = p.finish(); // its last write done before the file goes
        }
        if let Some(d) = &self.opts.status_dir {
            status::unpublish(d, std::process::id());
        }
        self.guests
            .iter()
            .map(|g| GuestEnd {
                name: g.name.clone(),
                pid: g.pid,
                end: g.end.clone().unwrap_or(End::Exited(0)),
                vanished: g.vanished,
                calls: g
                    .stats
                    .iter()
                    .map(|s| (s.nr.name().into_owned(), s.count))
                    .collect(),
            })
            .collect()
    }

    /// The wait set: every guest's listener, pidfd and status pipe, and
    /// the opener's wake-up pipe, registered once.
    fn wait_set(&self) -> std::io::Result<PollSet> {
        // ppoll, not epoll: a poll waiter gets SYNC_WAKE_UP's wake-up on
        // the guest's CPU; epoll's callback drops it (mantle_sys::epoll)
        let mut ep = PollSet::new(3 * self.guests.len() + 2);
        for (i, g) in self.guests.iter().enumerate() {
            let base = i as u64 * 4;
            ep.add(g.listener.as_fd(), base + TOKEN_LISTENER)?;
            ep.add(g.pidfd.as_fd(), base + TOKEN_PIDFD)?;
            if let Some(s) = &g.status {
                ep.add(s.as_fd(), base + TOKEN_STATUS)?;
            }
        }
        if let Some(o) = &self.opener {
            ep.add(o.wake.as_fd(), TOKEN_OPENER)?;
        }
        if let Some(q) = &self.qos {
            ep.add(q.fd(), TOKEN_QOS)?;
        }
        Ok(ep)
    }

    fn reap(&mut self, i: usize) {
        let g = &mut self.guests[i];
        if let Ok(Some(w)) = supervise::wait_child(g.pid as i32, false) {
            if let Some(d) = &mut self.dispatch {
                d.exit(i);
            }
            if let Some(q) = &mut self.qos {
                q.exit(i);
            }
            g.end = Some(match (w.code, w.signal) {
                (Some(c), _) => End::Exited(c),
                (_, Some(s)) => End::Killed {
                    signal: s,
                    core: w.core,
                },
                _ => End::Exited(0),
            });
            // like a shell, quiet about the signals a user or a pipe sends
            if let Some(End::Killed { signal, core }) = g.end.clone().filter(|e| {
                !matches!(e, End::Killed { signal, .. } if *signal == libc::SIGINT || *signal == libc::SIGPIPE)
            }) {
                let msg = format!(
                    "guest {} (pid {}) killed by {}{}",
                    g.name,
                    g.pid,
                    signal_name(signal),
                    if core { " (core dumped)" } else { "" }
                );
                (self.log)(&msg);
            }
        }
    }

    /// One notification of guest `i`.
    fn serve(&mut self, i: usize) {
        let n = match self.guests[i].listener.recv() {
            Ok(n) => n,
            Err(e) => {
                if e.errno() == Some(libc::ENOENT) {
                    self.guests[i].vanished += 1;
                }
                return;
            }
        };
        if n.data.nr as u32 == rpc::SYS_EXEC && n.data.arch == mantle_sys::seccomp::AUDIT_ARCH {
            // a call to the executive: answered here, never by agents
            self.rpc
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
        self.unboost(n.pid);
        if self.qos.as_ref().is_some_and(|q| q.has(i))
            && crate::qos::Qos::wants().contains(&(n.data.nr as u32))
            && n.data.arch == mantle_sys::seccomp::AUDIT_ARCH
        {
            let taken = self.qos.as_mut().is_some_and(|q| {
                q.take(i, n.id, n.pid, n.data.nr as u32, &n.data.args)
                    .is_ok()
            });
            if taken {
                self.serve_qos();
                return;
            }
        }
        let Some(call) = protected::call_of(&n, received_ns) else {
            let _ = self.guests[i].listener.reply_error(n.id, libc::ENOSYS);
            return;
        };
        self.decide(i, n.id, call, t0);
    }

    fn decide(&mut self, i: usize, id: u64, call: Call, t0: Instant) {
        let g = &mut self.guests[i];
        let listener = Arc::clone(&g.listener);
        let d = {
            let mut pg = ProtectedGuest {
                listener: &listener,
                id,
                tid: call.tid,
            };
            Executor::decide(&mut g.chain, &call, &mut pg)
        };
        let gpid = g.pid;
        let kernel_ns = 0;
        let sched = self.dispatch.as_mut().map(|d| (d, i));
        let sent = match self.exec.carry_out(&d, &call, t0, gpid, sched) {
            Action::Continue => listener.reply_continue(id).map(|()| Outcome::Unseen),
            Action::Fail(e) => listener
                .reply_error(id, e)
                .map(|()| Outcome::Result(-i64::from(e))),
            Action::Return(v) => listener.reply(id, v).map(|()| Outcome::Result(v)),
            Action::Hold(until) => {
                self.held.push(Held {
                    guest: i,
                    id,
                    call,
                    until,
                    t0,
                });
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
                                listener: &listener,
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
                            if let Some(o) = &self.opener {
                                let req = OpenRequest {
                                    guest: i,
                                    id,
                                    call,
                                    decision: d.clone(),
                                    listener: Arc::clone(&listener),
                                    dirfd,
                                    path,
                                    flags,
                                    mode,
                                    t0,
                                };
                                if o.tx.send(req).is_ok() {
                                    self.pending_opens += 1;
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
                    let g = &mut self.guests[i];
                    if !g.said_enosys.contains(&p.nr) {
                        g.said_enosys.push(p.nr);
                        let msg = format!(
                            "guest {}: performing {} on a guest's behalf is not supported on the protected path: answered ENOSYS",
                            g.name,
                            p.nr.name()
                        );
                        (self.log)(&msg);
                    }
                    listener
                        .reply_error(id, libc::ENOSYS)
                        .map(|()| Outcome::Result(-i64::from(libc::ENOSYS)))
                }
            }
        };
        let g = &mut self.guests[i];
        let outcome = match sent {
            Ok(o) => o,
            Err(_) => {
                // ENOENT: the call vanished (killed, interrupted)
                g.vanished += 1;
                Outcome::Result(-i64::from(libc::ENOENT))
            }
        };
        let t = Times {
            executive_ns: (t0.elapsed().as_nanos() as u64).saturating_sub(kernel_ns),
            kernel_ns,
        };
        g.chain.after(&call, &d, outcome, t);
        g.executive_ns += t.executive_ns;
        if let Some(s) = g.stat(call.nr) {
            s.count += 1;
            s.executive_ns += t.executive_ns;
            s.kernel_ns += t.kernel_ns;
        }
    }

    fn opens_done(&mut self) {
        let Some(o) = &self.opener else { return };
        supervise::drain(o.wake.as_fd());
        while let Ok(d) = o.rx.try_recv() {
            self.pending_opens = self.pending_opens.saturating_sub(1);
            let Some(g) = self.guests.get_mut(d.guest) else {
                continue;
            };
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
    /// within `spin_before` (nothing else is served meanwhile: a bounded
    /// stretch, documented as the mode's cost).
    fn spin_to_due(&self) {
        if self.opts.spin_before.is_zero() {
            return;
        }
        let Some(due) = self.next_due() else {
            return;
        };
        if due.saturating_duration_since(Instant::now()) <= self.opts.spin_before {
            while Instant::now() < due {
                std::hint::spin_loop();
            }
        }
    }

    /// Serves the held reads the QoS reader may serve now. A reserved
    /// guest whose read was answered runs next: at SCHED_FIFO (`--boost`,
    /// default 1) until its next interposed call.
    fn serve_qos(&mut self) {
        let guests = &self.guests;
        let mut served = [0u32; 16];
        let mut n = 0;
        if let Some(q) = &mut self.qos {
            q.serve(
                |g| {
                    guests
                        .get(g)
                        .filter(|x| x.listener_open)
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
        let prio = self.opts.boost.unwrap_or(1);
        for &tid in &served[..n] {
            if !self.boosted.contains(&tid)
                && self.boosted.len() < self.boosted.capacity()
                && supervise::set_fifo_of(tid, prio).is_ok()
            {
                self.boosted.push(tid);
            }
        }
    }

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

    /// Sends the signals of the timers that are due (at the executive's
    /// priority: their delivery does not wait for the guests' CPU share).
    fn fire_timers(&mut self) {
        if self.exec.timers.is_empty() {
            return; // no clock read per call for nothing
        }
        // out of self while it fires, so that each signalled thread can
        // be boosted at once (an empty table allocates nothing)
        let mut timers = std::mem::replace(&mut self.exec.timers, crate::kept::KeptTimers::lazy(0));
        timers.fire(Instant::now(), |tid| self.boost(tid));
        self.exec.timers = timers;
    }

    fn boost(&mut self, tid: u32) {
        let Some(p) = self.opts.boost else { return };
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

    fn expire_held(&mut self) {
        if self.held.is_empty() {
            return; // no clock read per call for nothing
        }
        let now = Instant::now();
        let mut k = 0;
        while k < self.held.len() {
            if self.held[k].until <= now {
                let h = self.held.swap_remove(k);
                if self.guests[h.guest]
                    .listener
                    .id_valid(h.id)
                    .unwrap_or(false)
                {
                    // released: boosted before its answer wakes it
                    self.boost(h.call.tid);
                    if let Some(d) = &mut self.dispatch {
                        d.poke(h.guest);
                    }
                    self.decide(h.guest, h.id, h.call, h.t0);
                } else {
                    self.guests[h.guest].vanished += 1;
                }
            } else {
                k += 1;
            }
        }
    }

    /// Offers a snapshot to the publisher thread (skipped while it still
    /// writes the previous one).
    fn publish(&mut self) {
        let Some(p) = &self.publisher else {
            return;
        };
        if p.failed() {
            if let Some(e) = self.publisher.take().and_then(|p| p.finish()) {
                let dir = self.opts.status_dir.take().unwrap_or_default();
                let msg = format!("cannot publish the status in {}: {e}", dir.display());
                (self.log)(&msg);
            }
            return;
        }
        let s = self.status();
        p.offer(s);
    }

    /// The status as `exec status` shows it.
    pub fn status(&self) -> ExecStatus {
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
            guests: self
                .guests
                .iter()
                .enumerate()
                .map(|(i, g)| GuestStatus {
                    name: g.name.clone(),
                    pid: g.pid,
                    command: g.argv.clone(),
                    state: match &g.end {
                        None if g.status.is_some() => "starting",
                        None => "running",
                        Some(End::Exited(_)) => "exited",
                        Some(End::Killed { .. }) => "killed",
                        Some(End::NotStarted { .. }) => "not-started",
                    }
                    .into(),
                    exit_code: match g.end {
                        Some(End::Exited(c)) => Some(c),
                        _ => None,
                    },
                    signal: match g.end {
                        Some(End::Killed { signal, .. }) => Some(signal),
                        _ => None,
                    },
                    agents: g.agent_names.clone(),
                    calls: g
                        .stats
                        .iter()
                        .map(|s| CallStat {
                            name: s.nr.name().into_owned(),
                            count: s.count,
                            executive_ns: s.executive_ns,
                            kernel_ns: s.kernel_ns,
                        })
                        .collect(),
                    vanished: g.vanished,
                    held: self.held.iter().filter(|h| h.guest == i).count() as u64
                        + self.rpc.held_by(i),
                    executive_ns: g.executive_ns,
                    sched: self.dispatch.as_ref().and_then(|d| d.params(i)),
                    dispatched_ns: self
                        .dispatch
                        .as_ref()
                        .map_or(0, |d| d.stats.ran_ns.get(i).copied().unwrap_or(0)),
                    cpu: self.dispatch.as_ref().and_then(|d| d.cpu_of(i)),
                })
                .collect(),
        }
    }
}

/// SIGSEGV, SIGKILL... or "signal N" ([`crate::agents::decode::signal_name`]).
pub fn signal_name(sig: i32) -> String {
    crate::agents::decode::signal_name(sig).unwrap_or_else(|| format!("signal {sig}"))
}

//! The manager side (runs inside `mantle comp up`, or a test): starts the
//! components as supervised processes, owns their invocation regions, and
//! is the stack manager (TMEM paper §IV-C): it adds and removes contexts
//! asynchronously (G3a) through the same lock-free freelist the clients
//! use — a context on the freelist is not in use, so a removal can only
//! take a free one; a removal that finds none sets the relinquish bit and
//! completes on a later [`Manager::tick`].
//!
//! Each tick also: reaps dead components (their regions are marked dead,
//! their busy slots set to CALL_DEAD and woken, so callers get an error);
//! returns contexts held by callers that died (`caller_pid` gone, call
//! finished); reports holders past the P2 bound and acts on them
//! (`hold_action`: report, kill, or restart: kill, reclaim, and start the
//! component again in the same region with a new epoch once its callers
//! had [`RESTART_GRACE`] to see the death); and, every
//! `policy.period_ms`, runs the TMEM policy ([`Manager::run_policy`]:
//! Table II's snapshot in, `set_desired` out, [`policy::enforce`]d).
//!
//! Lock order: the manager's thread takes `cbufs` alone; the CBUF service
//! thread takes `cbufs` alone. No other locks.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mantle_abi::comp::*;
use mantle_sys::pifutex;

use crate::cbuf::{CbufCounters, CbufManager};
use crate::policy::{self, CacheView, Kind, Policy, Snapshot, ThreadBlock};
use crate::region::{Region, RegionCounters};
use crate::runtime::{Server, ENV_CBUF_SOCK, ENV_CBUF_TABLE, ENV_NAME, ENV_REGION, ENV_SERVERS};
use crate::system::{HoldAction, PolicyName, SystemFile};

/// How long a restarted component stays down: callers of the dead
/// instance see CALL_DEAD at once, and a caller between its pop and its
/// request notices the dead region within [`crate::runtime::LIVENESS_CHECK`].
pub const RESTART_GRACE: Duration = Duration::from_millis(100);

/// How long a component has, once started, to park every context thread
/// (`Env::serve_forever` / `mantle_comp_serve`): past it the start fails
/// (and `Manager::up` with it). docs/comp.md says so.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Restarts of one component allowed within [`RESTART_WINDOW`]: past
/// them a component that keeps dying stays down (RestartFailed).
pub const RESTART_BURST: usize = 5;
pub const RESTART_WINDOW: Duration = Duration::from_secs(10);

/// Reports of units held past the bound: each hold is reported once, and
/// at most this many a second in all (the rest are counted in one
/// [`Event::ReportsSuppressed`]).
pub const REPORTS_PER_SEC: u32 = 20;

use crate::Error;

pub struct Component {
    pub name: String,
    pub region: Arc<Region>,
    child: Option<Child>,
    pub pid: u32,
    pub exit: Option<String>,
}

pub struct Manager {
    pub spec: SystemFile,
    pub comps: Vec<Component>,
    pub cbufs: Arc<Mutex<CbufManager>>,
    /// The manager's ends of the components' CBUF sockets.
    socks: Arc<Vec<OwnedFd>>,
    child_socks: Vec<OwnedFd>,
    stop: Arc<AtomicBool>,
    service: Option<std::thread::JoinHandle<()>>,
    policy: Option<Box<dyn Policy>>,
    last_policy: Instant,
    policy_runs: u64,
    /// Cumulative block tables at the last policy run, per cache.
    prev_blocks: BTreeMap<(usize, Kind), Vec<ThreadBlock>>,
    last_snapshot: Snapshot,
    /// Per component: restart wanted (hold_action), and when it is due.
    restart_wanted: Vec<bool>,
    restart_at: Vec<Option<Instant>>,
    /// Per component: when it was restarted lately (crash-loop guard).
    restarts: Vec<Vec<Instant>>,
    /// Holds already reported: (component, unit, since); pruned each tick
    /// to the holds still past the bound.
    reported: std::collections::HashSet<(usize, u64, u64)>,
    /// The report budget: the second it counts, reports in it, suppressed.
    report_window: (Instant, u32, u32),
    policy_name: PolicyName,
    /// Cumulative tardiness tables at the last policy run, per component.
    prev_tardy: BTreeMap<usize, Vec<ThreadBlock>>,
    /// Tardiness reports refused at the boundary, since start.
    pub tardiness_rejected: u64,
    /// The last policy runs' decisions, newest last (at most HISTORY).
    history: std::collections::VecDeque<Run>,
}

/// Policy runs kept for `status` (the CLI also appends every run to its
/// decision log).
pub const HISTORY: usize = 64;

/// One policy run: what the policy decided, as set.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    pub run: u64,
    /// CLOCK_MONOTONIC ms.
    pub at_ms: u64,
    pub policy: &'static str,
    /// Real-time threads with tardiness since the run before: tid → ns.
    pub tardiness: BTreeMap<u32, u64>,
    pub decisions: Vec<policy::Decision>,
    pub clamped: Vec<policy::Clamped>,
}

/// The policy of a name for a system (None for `none`).
pub fn make_policy(spec: &SystemFile, name: PolicyName) -> Option<Box<dyn Policy>> {
    match name {
        PolicyName::None => None,
        PolicyName::Fixed => Some(Box::new(policy::Fixed {
            initial: spec
                .components
                .iter()
                .flat_map(|c| {
                    [
                        ((c.name.clone(), Kind::Stack), c.desired_stacks()),
                        ((c.name.clone(), Kind::Cbuf), c.desired_cbuf_pages()),
                    ]
                })
                .collect(),
        })),
        other => crate::tmem::by_name(other.as_str()),
    }
}

/// Something a tick found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Died {
        component: String,
        pid: u32,
        status: String,
    },
    Reclaimed {
        component: String,
        slot: u32,
        caller_pid: u32,
    },
    CbufsReclaimed {
        component: String,
        bytes: u64,
    },
    CbufHeldPastBound {
        component: String,
        cbuf: u32,
        holder_tid: u32,
        held_ms: u64,
        action: HoldAction,
    },
    Restarted {
        component: String,
        pid: u32,
        epoch: u32,
    },
    RestartFailed {
        component: String,
        error: String,
    },
    /// Holds past the bound found in the last second and not reported
    /// one by one (over [`REPORTS_PER_SEC`]).
    ReportsSuppressed {
        count: u32,
    },
    /// The policy asked for more (or less) than the bounds or the pool
    /// allow: what it asked and what was set.
    Clamped(crate::policy::Clamped),
    /// The policy set δ^j of a cache.
    Desired {
        component: String,
        kind: Kind,
        desired: u32,
    },
    /// `action` is what the manager did: `report` for a holder that is
    /// itself waiting on a call into another component (the innermost
    /// holder of a chain is the one acted on).
    HoldPastBound {
        component: String,
        slot: u32,
        caller_pid: u32,
        caller_tid: u32,
        held_ms: u64,
        action: HoldAction,
    },
}

impl Manager {
    /// Starts every component of `spec`, servers first; returns once each
    /// one's contexts are parked and its initial cache is on its freelist.
    pub fn up(spec: SystemFile) -> Result<Manager, Error> {
        spec.validate()?;
        let n = spec.components.len();
        let limits: Vec<usize> = spec
            .components
            .iter()
            .map(|c| c.cbuf_kib as usize * 1024)
            .collect();
        let readers = (0..n).map(|i| spec.downstream(i)).collect();
        let cbufs = CbufManager::new(&limits, readers, spec.limits.cbuf_pages as usize * 4096)?;
        let mut socks = Vec::new();
        let mut child_socks = Vec::new();
        for _ in 0..n {
            let (a, b) = mantle_sys::supervise::socketpair().map_err(Error::sys("socketpair"))?;
            socks.push(a);
            child_socks.push(b);
        }
        let policy = make_policy(&spec, spec.policy.name);
        let mut m = Manager {
            policy,
            last_policy: Instant::now(),
            policy_runs: 0,
            prev_blocks: BTreeMap::new(),
            last_snapshot: Snapshot::default(),
            restart_wanted: vec![false; n],
            restart_at: vec![None; n],
            restarts: vec![Vec::new(); n],
            reported: Default::default(),
            report_window: (Instant::now(), 0, 0),
            policy_name: spec.policy.name,
            prev_tardy: BTreeMap::new(),
            tardiness_rejected: 0,
            history: Default::default(),
            cbufs: Arc::new(Mutex::new(cbufs)),
            socks: Arc::new(socks),
            child_socks,
            stop: Arc::new(AtomicBool::new(false)),
            service: None,
            comps: spec
                .components
                .iter()
                .map(|c| {
                    Ok(Component {
                        name: c.name.clone(),
                        region: Arc::new(Region::create(&c.name, c.max_stacks())?),
                        child: None,
                        pid: 0,
                        exit: None,
                    })
                })
                .collect::<Result<_, Error>>()?,
            spec,
        };
        m.service = Some(m.spawn_service()?);
        m.publish_pi();
        // the policy's first decisions before any component runs: the
        // shares it gives hold from the first allocation (no component
        // can take the whole pool before the first period)
        if m.policy.is_some() {
            m.run_policy();
        }
        for idx in m.spec.start_order() {
            let stacks = m.spec.components[idx].stacks;
            if let Err(e) = m.start(idx, stacks) {
                m.down();
                return Err(e);
            }
        }
        Ok(m)
    }

    fn start(&mut self, idx: usize, stacks: u32) -> Result<(), Error> {
        let cs = self.spec.components[idx].clone();
        let region = self.comps[idx].region.clone();
        let mut cmd = Command::new(&cs.exec[0]);
        cmd.args(&cs.exec[1..]);
        let own = region.fd().as_raw_fd();
        mantle_sys::supervise::inherit_fd_and_die_with_parent(&mut cmd, own);
        // Isolation between components: each keeps only CAP_SYS_NICE (to
        // run its contexts at its callers' real-time priorities), so a
        // component started by root has no CAP_SYS_PTRACE and no
        // CAP_DAC_OVERRIDE; its runtime makes it non-dumpable at start
        // (Env::from_env). A sibling then cannot read or write its memory
        // (/proc/PID/mem, process_vm_*) nor reopen its memfds through
        // /proc/PID/fd. docs/comp.md, Security.
        mantle_sys::supervise::bound_caps_before_exec(
            &mut cmd,
            &[mantle_sys::supervise::CAP_SYS_NICE],
        );
        let mut servers = Vec::new();
        for t in &cs.invokes {
            let j = self.spec.index(t).ok_or_else(|| Error::Spec(t.clone()))?;
            let fd = self.comps[j].region.fd().as_raw_fd();
            mantle_sys::supervise::inherit_fd_and_die_with_parent(&mut cmd, fd);
            servers.push(format!("{t}={fd}"));
        }
        let sock = self.child_socks[idx].as_raw_fd();
        let table = self
            .cbufs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .table_fd(idx)
            .as_raw_fd();
        mantle_sys::supervise::inherit_fd_and_die_with_parent(&mut cmd, sock);
        mantle_sys::supervise::inherit_fd_and_die_with_parent(&mut cmd, table);
        cmd.env(ENV_CBUF_SOCK, sock.to_string())
            .env(ENV_CBUF_TABLE, table.to_string());
        cmd.env(ENV_NAME, &cs.name)
            .env(ENV_REGION, own.to_string())
            .env(ENV_SERVERS, servers.join(","));
        let mut child = cmd.spawn().map_err(|e| Error::Start(cs.name.clone(), e))?;
        let pid = child.id();
        region.h32(HDR_SERVER_PID).store(pid, Release);
        let t0 = Instant::now();
        while region.h32(HDR_READY).load(Acquire) < region.nctx() {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(Error::Start(
                    cs.name.clone(),
                    std::io::Error::other(format!("exited during start: {st}")),
                ));
            }
            if t0.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Start(
                    cs.name.clone(),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "its {} contexts were not all serving within {} s \
                             (a component must call mantle_comp_serve or \
                             Env::serve_forever at start)",
                            region.nctx(),
                            START_TIMEOUT.as_secs()
                        ),
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let c = &mut self.comps[idx];
        c.child = Some(child);
        c.pid = pid;
        c.exit = None;
        self.set_desired(idx, stacks);
        Ok(())
    }

    /// Starts component `idx` again after it died (hold_action restart):
    /// its CBUF memory was reclaimed when it died; its region becomes new
    /// (a new epoch: callers of the dead instance got an error) and keeps
    /// its δ^j.
    fn restart(&mut self, idx: usize) -> Event {
        let name = self.comps[idx].name.clone();
        let r = self.comps[idx].region.clone();
        let now = Instant::now();
        self.restarts[idx].retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if self.restarts[idx].len() >= RESTART_BURST {
            self.comps[idx].exit = Some("restarting too often".into());
            return Event::RestartFailed {
                component: name,
                error: format!(
                    "died {} times within {} s: left down",
                    RESTART_BURST + 1,
                    RESTART_WINDOW.as_secs()
                ),
            };
        }
        self.restarts[idx].push(now);
        let desired = r.h32(HDR_DESIRED).load(Acquire).max(1);
        r.reset();
        self.cbufs.lock().unwrap_or_else(|e| e.into_inner()).reset(
            idx,
            &self.socks[idx],
            &self.child_socks[idx],
        );
        match self.start(idx, desired) {
            Ok(()) => Event::Restarted {
                component: name,
                pid: self.comps[idx].pid,
                epoch: r.epoch(),
            },
            Err(e) => {
                mark_dead(&r);
                self.comps[idx].exit = Some(format!("restart failed: {e}"));
                Event::RestartFailed {
                    component: name,
                    error: e.to_string(),
                }
            }
        }
    }

    /// The CBUF manager's service thread: answers every component's
    /// requests (new slab, map a passed cbid) on its socket.
    fn spawn_service(&self) -> Result<std::thread::JoinHandle<()>, Error> {
        let (socks, cbufs, stop) = (self.socks.clone(), self.cbufs.clone(), self.stop.clone());
        std::thread::Builder::new()
            .name("cbuf-manager".into())
            .spawn(move || {
                // requesters lend this thread their priority through their
                // table's svc_pi word (cbuf.rs, `request_locked`)
                cbufs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .set_service_thread(mantle_sys::os::gettid());
                let mut open = vec![true; socks.len()];
                while !stop.load(Relaxed) {
                    let mut fds: Vec<libc::pollfd> = socks
                        .iter()
                        .zip(&open)
                        .map(|(s, &o)| libc::pollfd {
                            fd: if o { s.as_raw_fd() } else { -1 },
                            events: libc::POLLIN,
                            revents: 0,
                        })
                        .collect();
                    if mantle_sys::supervise::poll(&mut fds, 50).is_err() {
                        continue;
                    }
                    for (c, p) in fds.iter().enumerate() {
                        if p.revents == 0 {
                            continue;
                        }
                        let mut cb = cbufs.lock().unwrap_or_else(|e| e.into_inner());
                        if p.revents & libc::POLLIN == 0 {
                            open[c] = false;
                            continue;
                        }
                        // still readable under the lock? A restart drains
                        // a dead instance's requests under this lock, and
                        // a read of nothing would block with it held
                        let mut again = [libc::pollfd {
                            fd: socks[c].as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        }];
                        if !matches!(mantle_sys::supervise::poll(&mut again, 0), Ok(n) if n > 0) {
                            continue;
                        }
                        if cb.serve_one(c, &socks[c]).is_err() {
                            open[c] = false;
                        }
                    }
                }
            })
            .map_err(Error::sys("spawn cbuf manager"))
    }

    /// Reclaims component `name`'s free CBUF slabs now (the manager's
    /// asynchronous reclaim, G3a); returns the bytes given back.
    pub fn reclaim_cbufs(&self, name: &str) -> Result<usize, Error> {
        let i = self.index(name)?;
        Ok(self
            .cbufs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reclaim(i, false))
    }

    pub fn index(&self, name: &str) -> Result<usize, Error> {
        self.spec
            .index(name)
            .ok_or_else(|| Error::Spec(format!("no component {name:?}")))
    }

    /// A handle through which this (the manager's) process invokes a
    /// component: the entry point of a system.
    pub fn server(&self, name: &str) -> Result<Server, Error> {
        let i = self.index(name)?;
        Ok(Server::new(name, self.comps[i].region.clone()))
    }

    /// Table II's `set_desired(c, amount)` for stacks: records δ^j and
    /// moves the cache toward it now, as far as free contexts allow.
    pub fn set_desired(&self, idx: usize, amount: u32) {
        let r = &self.comps[idx].region;
        r.h32(HDR_DESIRED).store(amount.min(r.nctx()), Release);
        self.apply(r);
    }

    /// Table II's `set_desired(c, pages)` for CBUFs (see
    /// [`CbufManager::set_desired`]); returns δ^j as set.
    pub fn set_desired_cbufs(&self, idx: usize, pages: u32) -> u32 {
        self.cbufs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_desired(idx, pages)
    }

    /// Switches the policy of the running system (`mantle comp policy`):
    /// the next run is the new policy's, at once.
    pub fn set_policy(&mut self, name: PolicyName) {
        self.policy = make_policy(&self.spec, name);
        self.policy_name = name;
        self.publish_pi();
        self.last_policy = Instant::now() - Duration::from_millis(self.spec.policy.period_ms);
    }

    /// The policy's period (`[policy] period_ms`, or as set).
    pub fn set_period(&mut self, period: Duration) {
        self.spec.policy.period_ms = (period.as_millis() as u64).clamp(1, 60_000);
    }

    /// Tells every cache whether blocked threads lend their priority (the
    /// policy's `pi`; no policy: yes).
    fn publish_pi(&self) {
        let nopi = self.policy.as_ref().is_some_and(|p| !p.pi());
        let cb = self.cbufs.lock().unwrap_or_else(|e| e.into_inner());
        for (i, c) in self.comps.iter().enumerate() {
            c.region.h32(HDR_NOPI).store(nopi as u32, Release);
            cb.set_nopi(i, nopi);
        }
    }

    /// The last policy runs, oldest first.
    pub fn history(&self) -> impl Iterator<Item = &Run> {
        self.history.iter()
    }

    /// One run of the TMEM policy now: the snapshot of every cache (used
    /// bits counted and cleared, per-thread blocks since the last run),
    /// the policy's decisions held to the bounds and the pools, and
    /// `set_desired` for each. Without a policy (`name = "none"`) the
    /// snapshot is still taken (for status).
    pub fn run_policy(&mut self) -> Vec<Event> {
        let snap = self.snapshot();
        let (mut decisions, clamped) = match self.policy.as_mut() {
            Some(p) => policy::enforce(&snap, p.run(&snap)),
            None => Default::default(),
        };
        let mut ev: Vec<Event> = clamped.iter().cloned().map(Event::Clamped).collect();
        let mut set = Vec::new();
        // decreases first: the pool is never over-committed in between
        decisions.sort_by_key(|d| {
            let cur = snap.caches.get(&(d.component.clone(), d.kind));
            cur.is_some_and(|v| d.desired > v.desired)
        });
        for d in decisions {
            let Some(idx) = self.spec.index(&d.component) else {
                continue;
            };
            let desired = match d.kind {
                Kind::Stack => {
                    self.set_desired(idx, d.desired);
                    self.comps[idx].region.h32(HDR_DESIRED).load(Acquire)
                }
                Kind::Cbuf => self.set_desired_cbufs(idx, d.desired),
            };
            set.push(policy::Decision {
                component: d.component.clone(),
                kind: d.kind,
                desired,
            });
            ev.push(Event::Desired {
                component: d.component,
                kind: d.kind,
                desired,
            });
        }
        // status shows δ^j as set by this run
        let mut snap = snap;
        for ((c, k), v) in snap.caches.iter_mut() {
            if let Some(idx) = self.spec.index(c) {
                v.desired = match k {
                    Kind::Stack => self.comps[idx].region.h32(HDR_DESIRED).load(Acquire),
                    Kind::Cbuf => self
                        .cbufs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .desired_pages(idx),
                };
            }
        }
        self.history.push_back(Run {
            run: self.policy_runs + 1,
            at_ms: pifutex::monotonic_ns() / 1_000_000,
            policy: self.policy_name.as_str(),
            tardiness: snap.tardiness.0.clone(),
            decisions: set,
            clamped,
        });
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        self.last_snapshot = snap;
        self.policy_runs += 1;
        self.last_policy = Instant::now();
        ev
    }

    /// Table II's data for every (component, kind), since the last run.
    fn snapshot(&mut self) -> Snapshot {
        let mut s = Snapshot {
            pool: [
                (Kind::Stack, self.spec.limits.stacks),
                (Kind::Cbuf, self.spec.limits.cbuf_pages),
            ]
            .into(),
            minimum: 1,
            ..Default::default()
        };
        let mut jobs = BTreeMap::new();
        for (idx, c) in self.comps.iter().enumerate() {
            // a component that is down (died, restart pending or given
            // up) holds no memory and has no threads to serve: it is not
            // in the policy's input, and its tables are not read (they
            // belong to a dead instance; the restart replaces them)
            if c.exit.is_some() {
                continue;
            }
            let r = &c.region;
            let k = r.counters();
            let stacks = CacheView {
                allocated: k.allocated,
                in_use: k.busy,
                used_since: r.take_used(),
                blocked: k.waiters,
                desired: k.desired,
                max: k.nctx,
                ..Default::default()
            };
            let (cbufs, cb_threads, tardy) = {
                let cb = self.cbufs.lock().unwrap_or_else(|e| e.into_inner());
                (cb.view(idx), cb.thread_blocks(idx), cb.tardiness(idx))
            };
            // the component's tardiness reports since the last run, each
            // checked at the boundary: a counter that went back is a
            // negative report, a thread not real-time now is refused
            let prev = self
                .prev_tardy
                .insert(idx, tardy.clone())
                .unwrap_or_default();
            for now in &tardy {
                let before = prev
                    .iter()
                    .find(|p| p.tid == now.tid)
                    .copied()
                    .unwrap_or_default();
                if now.blocks == before.blocks && now.block_ns == before.block_ns {
                    continue;
                }
                let report = crate::tmem::TardinessReport {
                    tid: if now.tid == mantle_abi::comp::BLK_OTHERS {
                        0
                    } else {
                        now.tid
                    },
                    realtime: pifutex::is_realtime(now.tid),
                    jobs: now.blocks.wrapping_sub(before.blocks),
                    total_ns: (now.block_ns as i128 - before.block_ns as i128)
                        .clamp(i64::MIN as i128, i64::MAX as i128)
                        as i64,
                };
                if s.tardiness.add(&report, &mut jobs).is_err() {
                    self.tardiness_rejected += 1;
                }
            }
            for (kind, mut v, now) in [
                (Kind::Stack, stacks, k.threads),
                (Kind::Cbuf, cbufs, cb_threads),
            ] {
                let prev = self.prev_blocks.insert((idx, kind), now.clone());
                v.per_thread = policy::deltas(prev.as_deref().unwrap_or(&[]), &now);
                v.estimated_requests = v.estimated_requests();
                s.caches.insert((c.name.clone(), kind), v);
            }
        }
        s
    }

    /// Adds parked contexts or removes free ones until a^j = δ^j; when
    /// every remaining context is in use, sets the relinquish bit.
    fn apply(&self, r: &Region) {
        if r.dead() {
            return;
        }
        let want = r.h32(HDR_DESIRED).load(Acquire);
        let alloc = r.h32(HDR_ALLOCATED);
        while alloc.load(Acquire) < want {
            let Some(i) = (0..r.nctx()).find(|&i| {
                r.s32(i, CTX_OWN).load(Acquire) == OWN_PARKED
                    && r.s32(i, CTX_TID).load(Acquire) != 0
            }) else {
                break;
            };
            alloc.fetch_add(1, AcqRel);
            r.push(i);
        }
        while alloc.load(Acquire) > want {
            match r.pop() {
                Ok(Some(i)) => {
                    r.s32(i, CTX_OWN).store(OWN_PARKED, Release);
                    alloc.fetch_sub(1, AcqRel);
                    // the context thread gives its stack back (runtime)
                    pifutex::wake(r.s32(i, CTX_CALL), 1);
                }
                _ => {
                    r.h32(HDR_RELINQUISH).fetch_or(REL_STACK, AcqRel);
                    return;
                }
            }
        }
        if r.h32(HDR_WAITERS).load(Acquire) == 0 {
            r.h32(HDR_RELINQUISH).fetch_and(!REL_STACK, AcqRel);
        }
    }

    /// One round of supervision (call it every few milliseconds).
    pub fn tick(&mut self) -> Vec<Event> {
        let mut ev = Vec::new();
        for (idx, c) in self.comps.iter_mut().enumerate() {
            let Some(ch) = c.child.as_mut() else { continue };
            if let Ok(Some(st)) = ch.try_wait() {
                // killed for a hold, or died by itself: under "restart"
                // both come back
                if self.restart_wanted[idx] || self.spec.limits.hold_action == HoldAction::Restart {
                    self.restart_at[idx] = Some(Instant::now() + RESTART_GRACE);
                }
                c.exit = Some(st.to_string());
                c.child = None;
                mark_dead(&c.region);
                // the dead instance's state must not reach the next policy
                // run: its block and tardiness tables are replaced at the
                // restart (counting from zero: no baseline kept), and
                // under a policy its stack share goes back to the pool
                // (the restart starts it at the minimum; the policy gives
                // it more when its threads need it)
                self.prev_tardy.remove(&idx);
                self.prev_blocks.remove(&(idx, Kind::Stack));
                self.prev_blocks.remove(&(idx, Kind::Cbuf));
                if self.policy.is_some() {
                    c.region.h32(HDR_DESIRED).store(1, Release);
                }
                let i = self.spec.index(&c.name).unwrap_or(usize::MAX);
                let back = self
                    .cbufs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .reclaim(i, true);
                ev.push(Event::CbufsReclaimed {
                    component: c.name.clone(),
                    bytes: back as u64,
                });
                ev.push(Event::Died {
                    component: c.name.clone(),
                    pid: c.pid,
                    status: st.to_string(),
                });
            }
        }
        let dead: Vec<u32> = self
            .comps
            .iter()
            .filter(|c| c.exit.is_some())
            .map(|c| c.pid)
            .collect();
        let now = pifutex::monotonic_ns();
        let bound = self.spec.limits.hold_bound_ms;
        let mut kill = Vec::new();
        // holds past the bound, keyed (component, unit, since): reported
        // once each, within the rate limit, after the loops
        let mut holds: Vec<((usize, u64, u64), Event)> = Vec::new();
        // Threads waiting now on a call into a component: a hold past the
        // bound by one of them is explained by its callee's (the paper's
        // P2 is per invocation), so only the innermost holder of a chain
        // is acted on; the others are reported.
        let waiting: std::collections::HashSet<(u32, u32)> = self
            .comps
            .iter()
            .flat_map(|c| {
                let r = &c.region;
                (0..r.nctx())
                    // DEAD too: a caller of a dead server may not have
                    // seen it yet, it is still waiting on that call
                    .filter(|&i| {
                        r.s32(i, CTX_OWN).load(Acquire) == OWN_BUSY
                            && matches!(r.s32(i, CTX_CALL).load(Acquire), CALL_REQ | CALL_DEAD)
                    })
                    .map(|i| {
                        (
                            r.s32(i, CTX_CALLER_PID).load(Relaxed),
                            r.s32(i, CTX_CALLER_TID).load(Relaxed),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let act = |c: &Component, tid: u32| {
            let a = self.spec.limits.hold_action;
            if c.child.is_none() || waiting.contains(&(c.pid, tid)) {
                HoldAction::Report
            } else {
                a
            }
        };
        for (idx, c) in self.comps.iter().enumerate() {
            let r = &c.region;
            for i in 0..r.nctx() {
                if r.s32(i, CTX_OWN).load(Acquire) != OWN_BUSY {
                    continue;
                }
                let caller = r.s32(i, CTX_CALLER_PID).load(Relaxed);
                let call = r.s32(i, CTX_CALL).load(Acquire);
                let caller_gone = dead.contains(&caller)
                    || (caller != std::process::id()
                        && !mantle_sys::supervise::kill(caller as i32, 0).unwrap_or(true));
                if caller_gone && !r.dead() && call == CALL_DONE {
                    r.s32(i, CTX_CALL).store(CALL_IDLE, Release);
                    r.push(i);
                    crate::runtime::tmem_put(r);
                    ev.push(Event::Reclaimed {
                        component: c.name.clone(),
                        slot: i,
                        caller_pid: caller,
                    });
                    continue;
                }
                let since = r.s64(i, CTX_SINCE).load(Relaxed);
                let held_ms = now.saturating_sub(since) / 1_000_000;
                if call == CALL_REQ && held_ms > bound {
                    let action = act(c, r.s32(i, CTX_TID).load(Relaxed));
                    holds.push((
                        (idx, i as u64, since),
                        Event::HoldPastBound {
                            component: c.name.clone(),
                            slot: i,
                            caller_pid: caller,
                            caller_tid: r.s32(i, CTX_CALLER_TID).load(Relaxed),
                            held_ms,
                            action,
                        },
                    ));
                    if action != HoldAction::Report {
                        kill.push((idx, action));
                    }
                }
            }
            self.apply(r);
        }
        let mut cb = self.cbufs.lock().unwrap_or_else(|e| e.into_inner());
        for (i, c) in self.comps.iter().enumerate() {
            cb.apply(i);
            for (slab, obj, tid, held_ms, since) in cb.holders_past(i, bound) {
                let action = act(c, tid);
                let cbuf = slab << SLAB_SHIFT | obj;
                holds.push((
                    (i, 1 << 32 | cbuf as u64, since as u64),
                    Event::CbufHeldPastBound {
                        component: c.name.clone(),
                        cbuf,
                        holder_tid: tid,
                        held_ms,
                        action,
                    },
                ));
                if action != HoldAction::Report {
                    kill.push((i, action));
                }
            }
        }
        drop(cb);
        ev.extend(self.report(holds));
        kill.sort_by_key(|k| k.0);
        kill.dedup_by_key(|k| k.0);
        for (idx, action) in kill {
            // the child is not reaped yet (child.is_some()): its pid is
            // still ours to signal
            self.restart_wanted[idx] = action == HoldAction::Restart;
            let _ = mantle_sys::supervise::kill(self.comps[idx].pid as i32, libc::SIGKILL);
        }
        for idx in 0..self.comps.len() {
            if self.restart_at[idx].is_some_and(|t| Instant::now() >= t) {
                self.restart_at[idx] = None;
                self.restart_wanted[idx] = false;
                ev.push(self.restart(idx));
            }
        }
        // without a policy the run still takes the snapshot (status)
        if self.last_policy.elapsed() >= Duration::from_millis(self.spec.policy.period_ms) {
            ev.extend(self.run_policy());
        }
        ev
    }

    /// The holds past the bound to report now: each hold once (the set
    /// of reported holds keeps only those still past the bound), at most
    /// [`REPORTS_PER_SEC`] a second; the others are counted, and the
    /// count reported when its second ends.
    fn report(&mut self, holds: Vec<((usize, u64, u64), Event)>) -> Vec<Event> {
        let mut out = Vec::new();
        let (start, sent, suppressed) = &mut self.report_window;
        if start.elapsed() >= Duration::from_secs(1) {
            if *suppressed > 0 {
                out.push(Event::ReportsSuppressed { count: *suppressed });
            }
            (*start, *sent, *suppressed) = (Instant::now(), 0, 0);
        }
        let now: std::collections::HashSet<_> = holds.iter().map(|h| h.0).collect();
        self.reported.retain(|k| now.contains(k));
        for (key, e) in holds {
            if !self.reported.insert(key) {
                continue;
            }
            if *sent < REPORTS_PER_SEC {
                *sent += 1;
                out.push(e);
            } else {
                *suppressed += 1;
            }
        }
        out
    }

    pub fn status(&self) -> Status {
        Status {
            policy: PolicyStatus {
                name: self.policy_name.as_str(),
                period_ms: self.spec.policy.period_ms,
                runs: self.policy_runs,
                pi: self.policy.as_ref().is_none_or(|p| p.pi()),
                tardiness_rejected: self.tardiness_rejected,
            },
            last_run: self.history.back().cloned(),
            components: self
                .comps
                .iter()
                .map(|c| ComponentStatus {
                    name: c.name.clone(),
                    pid: c.pid,
                    alive: c.child.is_some(),
                    exit: c.exit.clone(),
                    stacks: c.region.counters(),
                    cbufs: self
                        .cbufs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .counters(self.spec.index(&c.name).unwrap_or(0)),
                    tmem: [Kind::Stack, Kind::Cbuf]
                        .into_iter()
                        .filter_map(|kind| {
                            let v = self.last_snapshot.caches.get(&(c.name.clone(), kind))?;
                            Some(TmemStatus {
                                kind,
                                view: v.clone(),
                            })
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The snapshot of the last policy run (Table II's data).
    pub fn last_snapshot(&self) -> &Snapshot {
        &self.last_snapshot
    }

    /// Stops every component (SIGKILL: components hold no state the
    /// system keeps) and reaps it.
    pub fn down(&mut self) {
        for c in self.comps.iter_mut().rev() {
            if let Some(mut ch) = c.child.take() {
                let _ = ch.kill();
                let st = ch.wait();
                c.exit = Some(st.map_or_else(|e| e.to_string(), |s| s.to_string()));
            }
            mark_dead(&c.region);
        }
    }

    /// Map of component names to pids, for tests and status.
    pub fn pids(&self) -> BTreeMap<String, u32> {
        self.comps.iter().map(|c| (c.name.clone(), c.pid)).collect()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.down();
        self.stop.store(true, Relaxed);
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
    }
}

/// Marks a region dead and wakes everybody blocked on it: callers waiting
/// for a result get CALL_DEAD, callers in tmem_get see `dead`.
fn mark_dead(r: &Region) {
    r.h32(HDR_DEAD).store(1, Release);
    for i in 0..r.nctx() {
        if r.s32(i, CTX_OWN).load(Acquire) == OWN_BUSY {
            let _ = r
                .s32(i, CTX_CALL)
                .compare_exchange(CALL_REQ, CALL_DEAD, AcqRel, Acquire);
        }
        pifutex::wake(r.s32(i, CTX_CALL), i32::MAX);
    }
    pifutex::wake(r.h32(HDR_FREE_SEQ), i32::MAX);
    pifutex::wake(r.h32(HDR_DEAD), i32::MAX);
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub policy: PolicyStatus,
    /// The last policy run's decisions (None before the first).
    pub last_run: Option<Run>,
    pub components: Vec<ComponentStatus>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PolicyStatus {
    pub name: &'static str,
    pub period_ms: u64,
    /// Policy runs so far.
    pub runs: u64,
    /// Whether blocked threads lend their priority (the "-nopi" policies
    /// say no).
    pub pi: bool,
    /// Tardiness reports refused at the boundary since start.
    pub tardiness_rejected: u64,
}

/// One cache as the last policy run saw it: a^j, in use, used since the
/// run before, blocked, per-thread block time and count since the run
/// before, δ^j, r^j.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TmemStatus {
    pub kind: Kind,
    #[serde(flatten)]
    pub view: CacheView,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ComponentStatus {
    pub name: String,
    pub pid: u32,
    pub alive: bool,
    pub exit: Option<String>,
    pub stacks: RegionCounters,
    pub cbufs: CbufCounters,
    /// Table II per TMEM kind, from the last policy run (empty before).
    pub tmem: Vec<TmemStatus>,
}

//! The fast path's enforcement gate: what the fast path enforces is
//! enforced by the kernel, as on the protected path.
//!
//! Why: everything on the fast path lives in the guest's address space
//! (the stub, the Syscall User Dispatch selector, the shared region), and
//! a guest can undo any of it: turn dispatch off with prctl, write ALLOW
//! into the selector, jump to the stub's own `syscall` instruction, exec
//! a static binary or clear its environment. None of that can remove a
//! seccomp filter.
//!
//! Mechanism: before the guest's exec (a `pre_exec` of its Command), the
//! child enters the redirect's mount namespace, sets no_new_privs and
//! installs a filter that refuses [`Enforcement::refuse`] in the kernel
//! and notifies the enforcing agents' calls (`--deny`'s families) to a new
//! listener, which it passes to the gate's thread over a socketpair
//! (the sendmsg passes the filter by its launch cookie). The thread
//! decides each notification with a chain of the enforcing agents alone
//! and answers CONTINUE or the errno. The fast path's own chain (trace,
//! count, delay, sleep, ...) never holds an enforcing agent, so the stub
//! only accelerates what observes or schedules: a forwarded call that an
//! agent lets through is made by the stub from its page, and the filter
//! sees it there like anywhere else.
//!
//! The guest's start: the first notification of the new listener comes
//! from the launcher child, before its exec (nothing else runs the filter
//! yet), so the gate tells the chain that pid ([`Chain::started`]) and
//! an exec deny lets the launcher's own exec through once.
//!
//! Observing agents in the gate (issue 29): `--count` of named calls
//! with nothing else for the stub to do is the gate's too (the CLI puts
//! the count agent in the gate's chain and loads no stub), so that calls
//! no agent wants never trap: the filter notifies only the named calls,
//! from anywhere (the loader, a static binary, an unrewritable site),
//! and the gate counts them as the protected path does (a notification
//! round trip each, result unseen). Its agents' `after` runs before the
//! answer.
//!
//! Invariants: the gate reads no guest memory (its agents decide by call
//! number), so there is nothing a racing guest thread could change; the
//! thread ends when no task runs the filter any more (POLLHUP).

use crate::agent::{Call, Chain, Decision, Guest, GuestError, Outcome, Times};
use crate::enforce::Enforcement;
use crate::sysno::Sysno;
use mantle_sys::seccomp::{self, Listener};
use mantle_sys::supervise;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::process::Command;

/// A guest for the gate's agents: they read no memory.
struct NoMemory;

impl Guest for NoMemory {
    fn read(&mut self, addr: u64, _: &mut [u8]) -> Result<usize, GuestError> {
        Err(GuestError::Fault(addr))
    }
    fn still_pending(&mut self) -> bool {
        true
    }
}

/// What the gate counted, shared with its owner.
#[derive(Debug, Default)]
pub struct GateStats {
    pub continued: std::sync::atomic::AtomicU64,
    pub refused: std::sync::atomic::AtomicU64,
}

/// What [`arm`] gives back: the gate's counters, and the parent's end of
/// the child's socket, to drop once the child is spawned (before: the
/// child must inherit it; after: the gate must see end of file if the
/// child dies without sending its listener).
pub struct Armed {
    pub stats: std::sync::Arc<GateStats>,
    pub child_end: Option<std::os::fd::OwnedFd>,
}

/// Arms `cmd` (before its spawn) with the filter and, when `agents`
/// enforce anything through a listener, starts the gate's thread. The
/// filter and the namespace are made in the child after every pre_exec
/// registered before this call.
pub fn arm(
    cmd: &mut Command,
    enforce: &Enforcement,
    agents: Vec<Box<dyn crate::agent::Agent>>,
) -> io::Result<Armed> {
    let stats = std::sync::Arc::new(GateStats::default());
    let mut chain = Chain::new(agents);
    let wants: Vec<u32> = chain.wants().iter().map(|s| s.0).collect();
    if wants.is_empty() && enforce.refuse.is_empty() && !enforce.enforcing {
        return Ok(Armed {
            stats,
            child_end: None,
        });
    }
    let cookie = mantle_sys::os::random_u64()?;
    let filter = seccomp::filter(&wants, &enforce.refuse, Some(cookie));
    let binds = mantle_sys::mountns::Binds::prepare(&enforce.binds().map_err(io::Error::other)?)?;
    let (mine, theirs) = if wants.is_empty() {
        (None, None)
    } else {
        let (m, t) = supervise::socketpair()?;
        (Some(m), Some(t))
    };
    supervise::filter_before_exec(
        cmd,
        binds,
        filter,
        theirs.as_ref().map(|t| t.as_raw_fd()),
        cookie,
    );
    let Some(mine) = mine else {
        return Ok(Armed {
            stats,
            child_end: None,
        });
    };
    let st = stats.clone();
    std::thread::Builder::new()
        .name("mantle-gate".into())
        .spawn(move || {
            let Ok(fd) = supervise::recv_fd(mine.as_fd()) else {
                return;
            };
            let Ok(listener) = Listener::from_fd(fd) else {
                return;
            };
            serve(&listener, &mut chain, &st);
        })?;
    Ok(Armed {
        stats,
        child_end: theirs,
    })
}

/// Answers notifications until no task runs the filter.
fn serve(l: &Listener, chain: &mut Chain, stats: &GateStats) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut first = true;
    loop {
        let mut pfd = [libc::pollfd {
            fd: l.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        match supervise::poll(&mut pfd, -1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        if pfd[0].revents & libc::POLLIN == 0 {
            return; // POLLHUP: nobody runs the filter any more
        }
        let n = match l.recv() {
            Ok(n) => n,
            Err(e) if e.errno() == Some(libc::ENOENT) => continue,
            Err(e) if e.errno() == Some(libc::EINTR) => continue,
            Err(_) => return,
        };
        if first {
            // the launcher, before its exec (module comment)
            chain.started(n.pid);
            first = false;
        }
        let received = std::time::Instant::now();
        let call = Call {
            tid: n.pid,
            nr: Sysno(n.data.nr as u32),
            args: n.data.args,
            ip: n.data.instruction_pointer,
            received_ns: 0,
            start_ns: 0,
        };
        let d = if n.data.arch == seccomp::AUDIT_ARCH {
            chain.before(&call, &mut NoMemory).0
        } else {
            Decision::Fail(libc::ENOSYS)
        };
        // the observers (--count of named calls) see the call before it is
        // answered: once answered, the guest may end and its counts be
        // read before this thread runs again
        let outcome = match d {
            Decision::Fail(e) => Outcome::Result(-i64::from(e)),
            _ => Outcome::Unseen,
        };
        let t = Times {
            executive_ns: received.elapsed().as_nanos() as u64,
            kernel_ns: 0,
        };
        chain.after(&call, &d, outcome, t);
        // ENOENT from an answer: the call vanished (its thread was killed
        // or a signal interrupted it); nothing to do
        let _ = match d {
            Decision::Fail(e) => {
                stats.refused.fetch_add(1, Relaxed);
                l.reply_error(n.id, e)
            }
            _ => {
                stats.continued.fetch_add(1, Relaxed);
                l.reply_continue(n.id)
            }
        };
    }
}

//! The fast interposition path: an in-guest trap forwarded through shared
//! memory (Hijack's guest → executive RPC, the shape of gVisor's systrap).
//!
//! Mechanism: [`run_fast`] creates a [`Region`] (a memfd: header, one slot
//! per guest thread, one path buffer per slot; layout in
//! [`mantle_abi::exec`]), starts the guest with `LD_PRELOAD` = the stub
//! (`crates/exec/stub/stub.c`, built into `libmantle-stub.so`) and the
//! region's fd in `MANTLE_FAST_FD` (and a [`door::Door`] for processes
//! that lost it in `MANTLE_FAST_DOOR`), and serves it with a [`Server`] until
//! the guest exits. The stub turns Syscall User Dispatch on, with its
//! own code in one excluded page at a fixed address: every other system
//! call of the guest raises SIGSYS, and the handler forwards the wanted
//! ones (header bitmap) through its thread's slot (spin, then futex) and
//! applies the answer: a value, or CONTINUE (the guest makes the possibly
//! changed call itself and reports the result, so `after` hooks see real
//! results); unwanted calls it makes directly.
//!
//! Trust: the region is writable by the guest. The fast path is for
//! cooperative speed: the guest can corrupt its own slots, jump into the
//! excluded page, or turn dispatch off; the executive
//! validates every slot it reads ([`server`]), keeps all of its state in
//! its own memory, and a guest cannot reach that memory. Security
//! decisions belong on the protected path (seccomp user notification).
//!
//! Processes and threads: the stub arms dispatch in every thread and child
//! it creates (it emulates clone and fork in its handler); a thread claims
//! a free slot at its first wanted call (CAS of its tid), a child after
//! fork claims its own (the stub compares its cached tid with gettid);
//! exec clears dispatch and the stub in the new image maps the region
//! again from the inherited fd and arms it. The region holds thousands of
//! slots (sparse memory); the executive scans those below the high-water
//! mark; slots come back at exit (the stub) or from dead owners (the
//! executive's sweep); a call that finds no slot is made unobserved, never
//! failed. Protocol, validation and limits: docs/exec-fast.md.
//!
//! Lifetimes: [`run_fast`] serves one guest from the calling process;
//! [`run_fast_supervised`] is the executive process of `mantle run --path
//! fast` under [`crate::reaper`] (a child subreaper that adopts and serves
//! orphaned guests, forwards SIGTERM/SIGHUP to the guest, and kills the
//! guest tree if the reaper is killed, unless fail-open).

pub mod door;
pub mod gate;
pub mod region;
pub mod server;

pub use region::Region;
pub use server::{FastGuest, Server, Stats};

use crate::agent::Chain;
use crate::sysno::Sysno;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// Default fixed address of the stub's syscall page in every guest image
/// (64 GiB: below where the kernel places mmaps and PIE binaries, above
/// non-PIE binaries and their heap).
pub const TRAMP_ADDR: u64 = 0x10_0000_0000;

/// Default capacity of the region: guest threads with a slot at once.
/// The memfd is sparse: 16384 slots are 66 MiB of address space in each
/// guest process (2 MiB of slots, 64 MiB of path buffers) but only the
/// pages touched are memory.
pub const DEFAULT_SLOTS: usize = 16384;

/// How to run the fast path.
#[derive(Clone, Debug)]
pub struct FastOptions {
    /// The region's capacity: slots (guest threads with a slot at once),
    /// 1..=[`mantle_abi::exec::FAST_MAX_SLOTS`]. A thread that finds none
    /// makes its calls unobserved (counted in [`Stats::overflow`]).
    pub slots: usize,
    /// Guest spin iterations (`pause`) before it sleeps on its slot.
    pub guest_spin: u32,
    /// How long the executive keeps polling after real work before it
    /// sleeps (see [`Server::serve`]); zero: never spins.
    pub exec_spin: Duration,
    /// The stub; default `MANTLE_STUB` or the one built with this crate.
    pub stub: Option<PathBuf>,
    /// Fixed address of the stub's syscall page.
    pub tramp: u64,
    /// Let the stub rewrite trapped `mov $nr,%eax; syscall` sites into
    /// jumps (no signal for later calls from that site; single-threaded
    /// processes only). Off by default: it patches the guest's code.
    pub rewrite: bool,
    /// Extended mode's last stretch ([`Server::set_extended`]); zero: off.
    pub extended: Duration,
    /// SCHED_FIFO priority of a guest thread whose held call was answered,
    /// until its next call ([`Server::set_boost`]).
    pub boost: Option<i32>,
    /// SCHED_FIFO priority of the executive (this thread) while it serves,
    /// memory locked (as it is touched: the region is sparse); None or 0:
    /// left as it is (the fast path's default: a real-time executive costs
    /// a class switch per call on a shared CPU, docs/exec.md).
    pub priority: Option<i32>,
    /// What the kernel enforces ([`gate`]): the filter's refusals and the
    /// redirect's namespace; the enforcing agents come with
    /// [`spawn_fast_enforced`].
    pub enforce: crate::enforce::Enforcement,
    /// When the executive dies, the guests run on unsupervised (the stub
    /// makes their calls itself; the root guest is not tied to the
    /// executive by PR_SET_PDEATHSIG) instead of being killed.
    pub fail_open: bool,
    /// `--count` served in the stub: these calls are counted by the guest
    /// processes themselves in the region's counters (no hand-off per
    /// call), and added to the table when the guest ends
    /// ([`fold_counts`]). The count agent is then not in the chain.
    pub count: Option<(std::sync::Arc<crate::agents::count::CountTable>, Vec<Sysno>)>,
    /// `--exec-cpus`: one serving thread per CPU, pinned there, each
    /// serving the guest threads placed on it ([`Server::set_design`]);
    /// empty: one unpinned thread.
    pub cpus: Vec<usize>,
    /// `--exec-locking`: giant or fine, as the protected path's.
    pub locking: crate::executive::Locking,
}

/// The executive's spin after work when this process may use more than
/// one CPU (on one CPU a spinning side only delays the other): tens of
/// microseconds, about a cross-CPU wake-up on these machines
/// (docs/exec-fast.md "Spinning").
pub const EXEC_SPIN: Duration = Duration::from_micros(50);

impl Default for FastOptions {
    fn default() -> Self {
        // on one CPU a spinning side only delays the other
        let many = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
        FastOptions {
            slots: DEFAULT_SLOTS,
            guest_spin: if many { 2000 } else { 0 },
            exec_spin: if many { EXEC_SPIN } else { Duration::ZERO },
            stub: None,
            tramp: TRAMP_ADDR,
            rewrite: false,
            extended: Duration::ZERO,
            boost: None,
            priority: None,
            enforce: Default::default(),
            fail_open: false,
            count: None,
            cpus: Vec::new(),
            locking: Default::default(),
        }
    }
}

/// Why the fast path could not run a guest.
#[derive(Debug, thiserror::Error)]
pub enum FastError {
    #[error("no command to run")]
    Empty,
    #[error("{0}: command not found")]
    NotFound(String),
    /// A statically linked guest cannot load the stub.
    #[error(
        "the fast path needs a dynamically linked guest: {0} is static (no ELF interpreter); use the protected path"
    )]
    Static(PathBuf),
    #[error("{0}: not an ELF executable the fast path understands")]
    NotElf(PathBuf),
    #[error("the fast-path stub {0} is missing")]
    NoStub(PathBuf),
    #[error("fast path: {what}")]
    Os {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

fn os(what: &'static str) -> impl FnOnce(io::Error) -> FastError {
    move |source| FastError::Os { what, source }
}

/// The stub library to preload.
pub fn stub_path(opts: &FastOptions) -> PathBuf {
    opts.stub
        .clone()
        .or_else(|| std::env::var_os("MANTLE_STUB").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(env!("MANTLE_STUB_BUILT")))
}

/// `prog` resolved through PATH like execvp.
pub fn resolve(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).is_file().then(|| PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Whether the ELF file at `path` is dynamically linked (has a PT_INTERP
/// program header). `Err(NotElf)` for anything else (a script: its
/// interpreter decides, so scripts are treated as dynamic by the caller).
pub fn is_dynamic(path: &Path) -> Result<bool, FastError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(os("open the guest's executable"))?;
    let mut b = vec![0u8; 64 * 1024];
    let n = f.read(&mut b).map_err(os("read the guest's executable"))?;
    let b = &b[..n];
    let bad = || FastError::NotElf(path.to_path_buf());
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return Err(bad());
    }
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    let phoff = u64_at(32).ok_or_else(bad)? as usize;
    let phentsize = u16_at(54).ok_or_else(bad)? as usize;
    let phnum = u16_at(56).ok_or_else(bad)? as usize;
    if phentsize < 56 {
        return Err(bad());
    }
    for k in 0..phnum {
        let t = u32_at(phoff.saturating_add(k * phentsize)).ok_or_else(bad)?;
        if t == 3 {
            return Ok(true); // PT_INTERP
        }
    }
    Ok(false)
}

/// Runs `cmd` as a guest on the fast path with `chain`, until it exits:
/// its exit status and what the executive counted. The guest is killed
/// if the calling thread dies (PR_SET_PDEATHSIG); a guest process whose
/// executive is gone kills itself at its next call (the stub's check).
pub fn run_fast(
    cmd: &[String],
    chain: Chain,
    opts: &FastOptions,
) -> Result<(ExitStatus, Stats), FastError> {
    run_fast_enforced(cmd, chain, Vec::new(), opts)
}

/// [`run_fast`] with enforcing agents for the [`gate`]
/// ([`spawn_fast_enforced`]).
pub fn run_fast_enforced(
    cmd: &[String],
    chain: Chain,
    enforcing: Vec<Box<dyn crate::agent::Agent>>,
    opts: &FastOptions,
) -> Result<(ExitStatus, Stats), FastError> {
    let (child, mut server) = spawn_fast_enforced(cmd, chain, enforcing, opts)?;
    executive_thread(opts)?;
    serve_child(child, &mut server, opts)
}

/// The serving thread's timer slack and priority, after the spawn (the
/// guest keeps its own slack and must not inherit the priority).
fn executive_thread(opts: &FastOptions) -> Result<(), FastError> {
    // the executive keeps the guests' time: its timed waits end on time
    mantle_sys::supervise::set_timer_slack_ns(1).map_err(os("set the timer slack"))?;
    if let Some(p) = opts.priority.filter(|&p| p > 0) {
        mantle_sys::supervise::set_fifo(p).map_err(os("make the executive SCHED_FIFO"))?;
        // on fault: locking ahead would commit the whole sparse region
        mantle_sys::supervise::lock_memory_on_fault().map_err(os("lock the executive's memory"))?;
    }
    Ok(())
}

/// How long the executive sleeps at most when nothing happens: the
/// guest's end and signals wake it earlier (a [`server::Waker`] rings),
/// held calls wake it when due; this bounds only what nothing announces.
const TICK: Duration = Duration::from_millis(100);

/// Starts `cmd` on the fast path without serving it (the caller calls
/// [`serve_child`]); for benchmarks that pin the executive themselves.
pub fn spawn_fast(
    cmd: &[String],
    chain: Chain,
    opts: &FastOptions,
) -> Result<(std::process::Child, Server), FastError> {
    spawn_fast_enforced(cmd, chain, Vec::new(), opts)
}

/// [`spawn_fast`] with enforcing agents (`--deny`), which the [`gate`]
/// runs on a seccomp listener, never in `chain` (whose calls the guest
/// could keep from the executive).
pub fn spawn_fast_enforced(
    cmd: &[String],
    chain: Chain,
    enforcing: Vec<Box<dyn crate::agent::Agent>>,
    opts: &FastOptions,
) -> Result<(std::process::Child, Server), FastError> {
    let prog = cmd.first().ok_or(FastError::Empty)?;
    let exe = resolve(prog).ok_or_else(|| FastError::NotFound(prog.clone()))?;
    match is_dynamic(&exe) {
        Ok(true) | Err(FastError::NotElf(_)) => {}
        Ok(false) => return Err(FastError::Static(exe)),
        Err(e) => return Err(e),
    }
    let wanted: Vec<u32> = chain.wants().iter().map(|s| s.0).collect();
    let counted: Vec<u32> = opts
        .count
        .as_ref()
        .map(|(_, w)| w.iter().map(|s| s.0).collect())
        .unwrap_or_default();
    // Nothing for the stub to do (only enforcing agents, which are the
    // filter's): the guest runs without it, at native speed (the stub
    // would make every call trap, Syscall User Dispatch having no
    // per-number selector).
    let load_stub = !wanted.is_empty() || !counted.is_empty();
    let stub = stub_path(opts);
    if load_stub && !stub.is_file() {
        return Err(FastError::NoStub(stub));
    }
    let region = Region::create(opts.slots, &wanted, opts.guest_spin, opts.tramp)
        .map_err(os("create the shared region"))?;
    let flags = if opts.rewrite {
        mantle_abi::exec::HDR_REWRITE
    } else {
        0
    } | if opts.fail_open {
        mantle_abi::exec::HDR_FAIL_OPEN
    } else {
        0
    };
    region.set_flags(flags);
    region.set_counted(&counted);
    let fd = region.fd().as_raw_fd();
    let door = door::Door::open(
        region
            .fd()
            .try_clone()
            .map_err(os("duplicate the region's fd"))?,
    )
    .map_err(os("open the region's door"))?;
    // its guests must not read this process's /proc files or ptrace it
    // (they are its children and the same user): the door, not
    // /proc/EXEC/fd/N, gives them the region again
    mantle_sys::supervise::set_not_dumpable().map_err(os("make the executive non-dumpable"))?;
    let mut preload = stub.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        preload.push(" ");
        preload.push(old);
    }
    let mut c = Command::new(&exe);
    c.arg0(prog).args(&cmd[1..]);
    if load_stub {
        c.env("LD_PRELOAD", preload)
            .env("MANTLE_FAST_FD", fd.to_string())
            .env("MANTLE_FAST_DOOR", door.address());
    }
    if opts.fail_open {
        mantle_sys::supervise::inherit_fd(&mut c, fd);
    } else {
        mantle_sys::supervise::inherit_fd_and_die_with_parent(&mut c, fd);
    }
    // last: the filter and the namespace, after the other pre_execs
    let armed =
        gate::arm(&mut c, &opts.enforce, enforcing).map_err(os("arm the enforcement gate"))?;
    let child = c.spawn().map_err(os("start the guest"))?;
    drop(armed.child_end);
    door.set_root(child.id());
    let mut server = Server::new(region, chain, child.id());
    server.set_design(&opts.cpus, opts.locking);
    server.keep_door(door);
    server.set_extended(opts.extended);
    server.set_boost(opts.boost);
    Ok((child, server))
}

/// Rings `waker` when one of `pids` ends (its pidfd becomes readable),
/// from a thread of its own that ends when the first of them
/// (`pids[0]`, the guest's root) has ended. Those that cannot be watched
/// (already gone) ring at once.
fn ring_at_exit(pids: &[u32], waker: server::Waker) -> Result<(), FastError> {
    let mut fds = Vec::new();
    let mut gone = false;
    for (k, &p) in pids.iter().enumerate() {
        match mantle_sys::os::pidfd_open(p, false) {
            Ok(fd) => fds.push((k == 0, fd)),
            Err(_) => gone = true,
        }
    }
    if gone {
        waker.ring();
    }
    std::thread::Builder::new()
        .name("mantle-watch".into())
        .spawn(move || {
            // a supervisor's signals are for the serving thread's wait
            let _ = mantle_sys::supervise::block_signals_here(&[
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
            ]);
            while !fds.is_empty() {
                let mut p: Vec<libc::pollfd> = fds
                    .iter()
                    .map(|(_, fd)| libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                if mantle_sys::supervise::poll(&mut p, -1).is_err() {
                    return;
                }
                let ended: Vec<bool> = p.iter().map(|p| p.revents != 0).collect();
                if ended.iter().any(|&e| e) {
                    waker.ring();
                }
                let mut k = 0;
                let mut root_ended = false;
                fds.retain(|(root, _)| {
                    let e = ended[k];
                    k += 1;
                    root_ended |= e && *root;
                    !e
                });
                if root_ended {
                    return;
                }
            }
        })
        .map_err(os("start the exit watcher"))?;
    Ok(())
}

/// Serves a guest started by [`spawn_fast`] until it exits.
pub fn serve_child(
    mut child: std::process::Child,
    server: &mut Server,
    opts: &FastOptions,
) -> Result<(ExitStatus, Stats), FastError> {
    let mut status = None;
    let mut err = None;
    // the guest's end wakes the executive at once, whatever its tick
    ring_at_exit(
        &[child.id()],
        server.waker().map_err(os("map the region's header"))?,
    )?;
    server.serve(opts.exec_spin, TICK, || {
        match child.try_wait() {
            Ok(Some(s)) => status = Some(s),
            Ok(None) => return false,
            Err(e) => err = Some(e),
        }
        true
    });
    fold_counts(server, opts);
    match (status, err) {
        (Some(s), _) => Ok((s, server.stats)),
        (None, Some(e)) => Err(FastError::Os {
            what: "wait for the guest",
            source: e,
        }),
        (None, None) => Err(FastError::Os {
            what: "wait for the guest",
            source: io::Error::other("the guest vanished"),
        }),
    }
}

/// Adds the stub's counters (`opts.count`'s calls) to the count table:
/// once, when the guest has ended. The counters are the guests' claims:
/// numbers only (errors bounded by calls, time converted saturating).
pub fn fold_counts(server: &Server, opts: &FastOptions) {
    let Some((table, nrs)) = &opts.count else {
        return;
    };
    for &nr in nrs {
        let c = server.region().count_of(nr.0);
        if c.calls > 0 {
            // time is sampled (mantle_abi::exec::FAST_TIME_EVERY): the
            // timed calls' average times every call
            let timed = c.timed.clamp(1, c.calls);
            let ns = (server.tsc_ns(c.ticks) as f64 / timed as f64 * c.calls as f64) as u64;
            table.add(nr, c.calls, c.errors, ns);
        }
    }
}

/// How the executive process of `mantle run --path fast` ended its guest.
fn status_of(w: &mantle_sys::supervise::Waited) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (w.code, w.signal) {
        (Some(c), _) => ExitStatus::from_raw((c & 0xff) << 8),
        (_, Some(s)) => ExitStatus::from_raw(s | if w.core { 0x80 } else { 0 }),
        _ => ExitStatus::from_raw(0),
    }
}

/// The executive process of `mantle run --path fast`, forked by
/// [`crate::reaper::run`] (`reaper`: that process's pid): runs `cmd` on
/// the fast path and serves the whole guest tree until the root guest
/// exits; its exit status and the counts.
///
/// What it adds to [`run_fast`], as the protected path's executive does:
/// * it is a child subreaper (PR_SET_CHILD_SUBREAPER), so guests orphaned
///   while the root runs become its children: still in the guest tree,
///   still served (`server::in_tree`); it reaps them;
/// * SIGTERM and SIGHUP (caught by the caller with
///   [`mantle_sys::supervise::catch_signals`], forwarded by the reaper)
///   are forwarded to the root guest, once each;
/// * if the reaper dies (SIGKILL of `mantle run`), nothing would be left
///   to kill the guests when this process ends: so it kills the guest
///   tree itself at once (every process below it) and returns, the root
///   counted as killed by SIGKILL; with [`FastOptions::fail_open`] it
///   serves on instead, and the guests run on unsupervised after it.
///
/// When it returns, the reaper kills what is left below it (background
/// guests), unless fail-open. With the exit status and the counts come
/// the serving threads' lock statistics ([`Server::lock_stats`]).
pub fn run_fast_supervised(
    cmd: &[String],
    chain: Chain,
    enforcing: Vec<Box<dyn crate::agent::Agent>>,
    opts: &FastOptions,
    reaper: u32,
) -> Result<(ExitStatus, Stats, Vec<crate::lockstat::LockStats>), FastError> {
    mantle_sys::supervise::set_child_subreaper().map_err(os("become a child subreaper"))?;
    let (child, mut server) = spawn_fast_enforced(cmd, chain, enforcing, opts)?;
    let root = child.id();
    // reaped below with the adopted orphans (waitpid(-1)), never through
    // `child`: dropping a Child neither waits nor kills
    drop(child);
    ring_at_exit(
        &[root, reaper],
        server.waker().map_err(os("map the region's header"))?,
    )?;
    executive_thread(opts)?;
    let mut status = None;
    let mut forwarded = 0;
    let mut abandoned = false;
    server.serve(opts.exec_spin, TICK, || {
        while let Ok(Some(w)) = mantle_sys::supervise::wait_child(-1, false) {
            if w.pid == root as i32 {
                status = Some(status_of(&w));
            }
        }
        let t = mantle_sys::supervise::term_requested();
        if t != 0 && t != forwarded && status.is_none() {
            forwarded = t;
            let _ = mantle_sys::supervise::kill(root as i32, t);
        }
        if !abandoned && std::os::unix::process::parent_id() != reaper {
            abandoned = true;
            if !opts.fail_open {
                // kills and reaps every process below this one, the root too
                crate::reaper::kill_descendants();
                use std::os::unix::process::ExitStatusExt;
                status.get_or_insert(ExitStatus::from_raw(libc::SIGKILL));
            }
        }
        status.is_some()
    });
    fold_counts(&server, opts);
    match status {
        Some(s) => Ok((s, server.stats, server.lock_stats("fast"))),
        None => Err(FastError::Os {
            what: "wait for the guest",
            source: io::Error::other("the guest vanished"),
        }),
    }
}

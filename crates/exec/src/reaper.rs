//! The executive-death policy: `mantle run` is two processes. The first
//! (the *reaper*, the one the shell waits for) marks itself
//! PR_SET_CHILD_SUBREAPER and forks the second, the executive, which
//! starts the guests. Orphaned guest processes, and the guests themselves
//! when the executive dies, become the reaper's children, so the reaper
//! always finds every guest below itself in /proc (PPid).
//!
//! When the executive ends (normally or killed, kill -9 included), the
//! reaper kills every process left below it: as root through a cgroup v2
//! of its own (mantle-exec.PID below the reaper's cgroup; the executive
//! joins it before starting guests; cgroup.kill kills them all at once,
//! then the cgroup is removed), and always with SIGKILL while walking
//! /proc until none is left (a guest forking meanwhile is caught on the
//! next pass), unless fail-open: then the guests run on unsupervised; their
//! interposed calls fail with ENOSYS, since the listener closed with the
//! executive (seccomp_unotify(2)). The reaper's exit status is the
//! executive's (the guest's status, passed through); an executive killed
//! by a signal makes it exit 1 with a message.
//!
//! Invariants: the executive is forked while the process has one thread
//! (mantle_sys::supervise::fork_single_threaded), so it may do anything.
//! The reaper reaps every child it gets; it ignores SIGINT and SIGQUIT
//! (the terminal sends them to the guests too) and forwards SIGTERM and
//! SIGHUP to the executive.

use mantle_sys::supervise::{self, Waited};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// How the executive ended, and what the reaper did about its guests.
#[derive(Debug)]
pub struct ReaperEnd {
    pub executive_pid: u32,
    pub executive: Waited,
    /// Processes the reaper killed afterwards.
    pub killed: usize,
}

/// Runs `executive` in a child process under the reaper policy.
pub fn run(fail_open: bool, executive: impl FnOnce() -> i32) -> Result<ReaperEnd, std::io::Error> {
    supervise::set_child_subreaper()?;
    supervise::catch_signals(
        &[libc::SIGTERM, libc::SIGHUP],
        &[libc::SIGINT, libc::SIGQUIT],
    );
    // reaped below, with the orphans
    // root: a cgroup of our own, killed at once with cgroup.kill
    let cg = if fail_open { None } else { make_cgroup() };
    // the executive is born in it (no migration: see
    // fork_child_into_cgroup), and the guests it starts after it; where
    // clone3 cannot, it moves itself there first
    let dir = cg.as_ref().and_then(|cg| std::fs::File::open(cg).ok());
    let mut executive = Some(executive);
    let mut run_executive = || (executive.take().expect("the executive runs once"))();
    let born = match &dir {
        Some(d) => supervise::fork_single_threaded_into(d.as_fd(), &mut run_executive).ok(),
        None => None,
    };
    let epid = match born {
        Some(c) => c.pid(),
        None => {
            let joined = cg.clone();
            supervise::fork_single_threaded(move || {
                if let Some(cg) = &joined {
                    let _ = std::fs::write(cg.join("cgroup.procs"), "0");
                }
                run_executive()
            })?
            .pid()
        }
    };
    drop(dir);
    let pidfd = mantle_sys::os::pidfd_open(epid, false)?;
    let mut forwarded = 0;
    let ended = loop {
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = supervise::poll(&mut fds, 200);
        let t = supervise::term_requested();
        if t != 0 && t != forwarded {
            forwarded = t;
            let _ = supervise::kill(epid as i32, t);
        }
        let mut done = None;
        while let Ok(Some(w)) = supervise::wait_child(-1, false) {
            if w.pid == epid as i32 {
                done = Some(w);
            }
        }
        if let Some(w) = done {
            break w;
        }
    };
    let mut killed = 0;
    if let Some(cg) = &cg {
        killed += kill_cgroup(cg);
    }
    if !fail_open {
        killed += kill_descendants();
    }
    if let Some(cg) = &cg {
        for _ in 0..100 {
            if remove_cgroup(cg).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // a killed executive could not remove its status file
    crate::status::unpublish(&crate::status::dir(), epid);
    Ok(ReaperEnd {
        executive_pid: epid,
        executive: ended,
        killed,
    })
}

/// Root (with cgroup v2): a new cgroup below this process's own, named
/// mantle-exec.PID; None where it cannot be made (then the /proc walk
/// alone kills the guests).
fn make_cgroup() -> Option<std::path::PathBuf> {
    if mantle_sys::os::geteuid() != 0 {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let base = mantle_sys::probe::cgroup2_mount()?.join(rel.trim_start_matches('/'));
    if !base.join("cgroup.procs").exists() {
        return None;
    }
    // cgroups of reapers that were killed themselves: removed when empty
    if let Ok(rd) = std::fs::read_dir(&base) {
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("mantle-exec."))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = remove_cgroup(&e.path());
            }
        }
    }
    let cg = base.join(format!("mantle-exec.{}", std::process::id()));
    if std::fs::create_dir(&cg).is_err() {
        // one named by our pid is an ended reaper's (pids are reused:
        // pid_max is 32768 here): removed if it is empty, as above;
        // otherwise none, rather than a cgroup shared with its processes
        remove_cgroup(&cg).ok()?;
        std::fs::create_dir(&cg).ok()?;
    }
    if !cg.join("cgroup.kill").exists() {
        let _ = std::fs::remove_dir(&cg);
        return None;
    }
    Some(cg)
}

/// Removes an empty cgroup and the per-guest cgroups below it (the
/// executive's dispatcher makes them; after a crash they are left).
fn remove_cgroup(cg: &std::path::Path) -> std::io::Result<()> {
    if let Ok(rd) = std::fs::read_dir(cg) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    std::fs::remove_dir(cg)
}

/// cgroup.kill (Linux 5.14): SIGKILL to every process in the cgroup at
/// once, a forking one included; returns how many there were.
fn kill_cgroup(cg: &std::path::Path) -> usize {
    let n = std::fs::read_to_string(cg.join("cgroup.procs"))
        .map(|s| s.lines().count())
        .unwrap_or(0);
    if n > 0 {
        let _ = std::fs::write(cg.join("cgroup.kill"), "1");
        std::thread::sleep(Duration::from_millis(5));
        while let Ok(Some(_)) = supervise::wait_child(-1, false) {}
    }
    n
}

/// Kills every process below this one, until none is left; returns how
/// many were killed.
pub fn kill_descendants() -> usize {
    let me = std::process::id() as i32;
    let mut killed = 0;
    for _ in 0..200 {
        // nothing below without a child: a process below this one has its
        // topmost ancestor below it as a child (orphans are reparented to
        // this subreaper); the walk of all of /proc (a few ms) is then
        // spared, as at every normal end where cgroup.kill or the guests'
        // own exit left nothing
        if !has_children() {
            break;
        }
        let below = descendants(me);
        if below.is_empty() {
            break;
        }
        for p in &below {
            if supervise::kill(*p, libc::SIGKILL).unwrap_or(false) {
                killed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        while let Ok(Some(_)) = supervise::wait_child(-1, false) {}
    }
    killed
}

/// Whether this process has a child, live or not yet reaped (reaps the
/// ones that ended).
fn has_children() -> bool {
    loop {
        match supervise::wait_child(-1, false) {
            Ok(Some(_)) => continue,
            Ok(None) => return true,
            // ECHILD: none; any other error: assume some, and walk
            Err(e) => return e.raw_os_error() != Some(libc::ECHILD),
        }
    }
}

/// Live (not zombie) processes below `root`, from /proc.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32)> = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid = f.next().and_then(|p| p.parse::<i32>().ok()).unwrap_or(0);
        if state != "Z" && state != "X" {
            parent_of.push((pid, ppid));
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent_of {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

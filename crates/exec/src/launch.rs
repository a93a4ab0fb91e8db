//! The launcher: starts one guest. Mechanism: the command is resolved on
//! PATH and its argv/envp are made C strings *before* the fork; the child
//! (mantle_sys::supervise::spawn_filtered) sets no_new_privs, installs a
//! seccomp filter that sends exactly the chain's wanted calls to a new
//! listener (every other call allowed), passes the listener to the
//! executive over a socketpair (SCM_RIGHTS: no privilege needed), closes
//! its copy and execs. The filter is inherited by every thread, fork and
//! exec of the guest: the whole tree stays a guest.
//!
//! Invariants: the child allocates nothing; a step that fails in the child
//! is reported on a close-on-exec status pipe as (step, errno), which the
//! executive reads in its loop (the exec itself may be an interposed call,
//! so the executive must already be serving when it happens).

use mantle_sys::seccomp::{self, Listener};
use mantle_sys::supervise;
use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a guest could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}: not executable")]
    NotExecutable(String),
    #[error("{0}: argument contains a NUL byte")]
    Nul(String),
    #[error("the filter wants {0} system calls (at most 1024)")]
    TooManyCalls(usize),
    #[error("cannot {what}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the guest died before handing over its seccomp listener ({step}: {source})")]
    Child {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("seccomp listener")]
    Listener(#[source] seccomp::Error),
    /// A `--redirect` that cannot be a bind on this file system.
    #[error("{0}")]
    Redirect(String),
}

impl LaunchError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            LaunchError::Sys { source, .. } | LaunchError::Child { source, .. } => {
                source.raw_os_error()
            }
            LaunchError::Listener(e) => e.errno(),
            _ => None,
        }
    }
}

/// A command ready to exec.
pub struct Prepared {
    pub argv: Vec<String>,
    path: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

/// Resolves `argv[0]` on PATH (a name with a slash is taken as is) and
/// makes the C strings.
pub fn prepare(argv: &[String]) -> Result<Prepared, LaunchError> {
    let first = argv
        .first()
        .ok_or_else(|| LaunchError::NotFound(String::new()))?;
    let path = resolve(first)?;
    let c = |s: &[u8], what: &str| CString::new(s).map_err(|_| LaunchError::Nul(what.into()));
    let args = argv
        .iter()
        .map(|a| c(a.as_bytes(), a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            c(&kv, "environment")
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Prepared {
        argv: argv.to_vec(),
        path: c(path.as_os_str().as_bytes(), first)?,
        args,
        env,
    })
}

fn resolve(name: &str) -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = PathBuf::from(name);
        if !p.exists() {
            return Err(LaunchError::NotFound(name.into()));
        }
        if !executable(&p) {
            return Err(LaunchError::NotExecutable(name.into()));
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut seen = false;
    for dir in std::env::split_paths(&path) {
        let p = dir.join(OsStr::new(name));
        if executable(&p) {
            return Ok(p);
        }
        seen |= p.exists();
    }
    Err(if seen {
        LaunchError::NotExecutable(name.into())
    } else {
        LaunchError::NotFound(name.into())
    })
}

/// A started guest: its pid, a pidfd, the listener, and the status pipe
/// (end of file: the exec happened).
pub struct Spawned {
    pub pid: u32,
    pub pidfd: OwnedFd,
    pub listener: Listener,
    pub status: OwnedFd,
    /// Whether SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP was set on the listener.
    pub sync_wake_up: bool,
}

/// Where a guest starts: the cgroup it joins before anything else (its
/// `cgroup.procs`, opened for writing) and the CPUs it may use (empty:
/// the executive's).
#[derive(Clone, Copy, Debug, Default)]
pub struct Placement<'a> {
    pub cgroup_procs: Option<std::os::fd::RawFd>,
    /// The cgroup v1 freezer's `cgroup.procs` it joins too (the
    /// dispatcher's, where that hierarchy is mounted).
    pub freezer_procs: Option<std::os::fd::RawFd>,
    pub cpus: &'a [usize],
}

/// Starts `cmd` with a filter sending the calls `wants` (numbers) to the
/// listener and refusing what `enforce` refuses, in the mount namespace
/// its redirect asks for; `sync_wake` asks for SYNC_WAKE_UP (set when
/// the kernel has it).
pub fn spawn(
    cmd: &Prepared,
    wants: &[u32],
    enforce: &crate::enforce::Enforcement,
    sync_wake: bool,
    place: Placement,
) -> Result<Spawned, LaunchError> {
    if wants.len() > 1024 {
        return Err(LaunchError::TooManyCalls(wants.len()));
    }
    // the child passes the listener with a sendmsg only this cookie lets
    // through (the call may be interposed, and nobody holds the listener
    // yet)
    let cookie = mantle_sys::os::random_u64().map_err(|source| LaunchError::Sys {
        what: "getrandom",
        source,
    })?;
    let filter = seccomp::filter(wants, &enforce.refuse, Some(cookie));
    let binds =
        mantle_sys::mountns::Binds::prepare(&enforce.binds().map_err(LaunchError::Redirect)?)
            .map_err(|source| LaunchError::Sys {
                what: "prepare the redirect's binds",
                source,
            })?;
    let mut argv: Vec<*const libc::c_char> = cmd.args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = cmd.env.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let sys = |what| move |source| LaunchError::Sys { what, source };
    let (mine, theirs) = supervise::socketpair().map_err(sys("create a socketpair"))?;
    let (status_r, status_w) = mantle_sys::os::pipe().map_err(sys("create a pipe"))?;
    let x = supervise::FilteredExec {
        path: &cmd.path,
        argv: &argv,
        envp: &envp,
        filter: &filter,
        launch_cookie: cookie,
        cgroup_procs: place.cgroup_procs,
        freezer_procs: place.freezer_procs,
        cpus: place.cpus,
        binds: &binds,
    };
    let child = supervise::spawn_filtered(&x, theirs, status_w).map_err(sys("fork"))?;
    let pid = child.pid();
    let fd = match supervise::recv_fd(std::os::fd::AsFd::as_fd(&mine)) {
        Ok(fd) => fd,
        Err(_) => {
            let (step, errno) = read_status(&status_r).unwrap_or((0, libc::EIO));
            let _ = supervise::wait_child(pid as i32, true);
            return Err(LaunchError::Child {
                step: step_name(step),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
    };
    let listener = Listener::from_fd(fd).map_err(LaunchError::Listener)?;
    let sync_wake_up = sync_wake && listener.set_sync_wake_up().is_ok();
    let pidfd = mantle_sys::os::pidfd_open(pid, false).map_err(sys("pidfd_open the guest"))?;
    Ok(Spawned {
        pid,
        pidfd,
        listener,
        status: status_r,
        sync_wake_up,
    })
}

/// Reads the child's (step, errno) report; None at end of file (the exec
/// happened) or on a short read.
pub fn read_status(fd: &OwnedFd) -> Option<(u32, i32)> {
    let mut b = [0u8; 8];
    mantle_sys::os::read_exact_raw(std::os::fd::AsFd::as_fd(fd), &mut b).ok()?;
    Some((
        u32::from_ne_bytes(b[..4].try_into().ok()?),
        i32::from_ne_bytes(b[4..].try_into().ok()?),
    ))
}

/// The name of a launch step, for messages.
pub fn step_name(step: u32) -> &'static str {
    match step {
        supervise::STEP_NO_NEW_PRIVS => "prctl(PR_SET_NO_NEW_PRIVS)",
        supervise::STEP_FILTER => "install the seccomp filter",
        supervise::STEP_SEND_LISTENER => "send the listener",
        supervise::STEP_EXEC => "execve",
        supervise::STEP_CGROUP => "join the guest's cgroup",
        supervise::STEP_AFFINITY => "sched_setaffinity",
        s => mantle_sys::mountns::step_name(s).unwrap_or("start"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_on_path_and_says_why_not() {
        assert!(resolve("sh").is_ok());
        assert!(matches!(
            resolve("no-such-command-mantle"),
            Err(LaunchError::NotFound(_))
        ));
        assert!(matches!(
            resolve("/etc/passwd"),
            Err(LaunchError::NotExecutable(_))
        ));
        assert!(matches!(
            prepare(&["sh".into(), "a\0b".into()]),
            Err(LaunchError::Nul(_))
        ));
    }
}

//! The target of a recording as the perf events see it: which tasks to
//! open them on, whether children inherit them, and for a command, the
//! gated child that runs it.
//!
//! Mechanism: a command is spawned stopped before its exec (the gate);
//! its events are opened `enable_on_exec`, so releasing the gate starts
//! the program and the sampling at once and nothing of mantle's own
//! start-up is counted. A process is followed through every thread it has
//! now (`/proc/PID/task`) with `inherit` for those it creates.

use super::Target;
use crate::kernel::{self, Child, Gate};
use crate::Error;

/// The tasks the events are opened on, and the command run, if any.
pub(super) struct Tracee {
    /// Tasks (-1: every task, system-wide).
    pub pids: Vec<i32>,
    /// Children inherit the events.
    pub inherit: bool,
    /// The events are enabled by the command's exec.
    pub on_exec: bool,
    /// For the session: "all CPUs", "pid N", "command: ...".
    pub desc: String,
    /// The command, when one is run.
    pub child: Option<Child>,
    /// Holds the command before its exec until released.
    pub gate: Option<Gate>,
    /// `--cgroup`: the cgroup directory the events are opened on (with
    /// `pids` [-1]).
    pub cgroup: Option<std::os::fd::OwnedFd>,
}

/// Resolves `target` into tasks, spawning the command (gated) if it is one.
pub(super) fn start(target: &Target) -> Result<Tracee, Error> {
    let mut child = None;
    let mut gate = None;
    let mut cgroup = None;
    let (pids, inherit, on_exec, desc): (Vec<i32>, bool, bool, String) = match target {
        Target::All => (vec![-1], false, false, "all CPUs".into()),
        Target::Pid(p) => {
            let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{p}/task"))
                .map_err(|_| Error::NoSuchProcess(*p))?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            (tids, true, false, format!("pid {p}"))
        }
        Target::Cgroup(dir) => {
            cgroup = Some(open_cgroup(dir)?);
            (vec![-1], false, false, format!("cgroup {}", dir.display()))
        }
        Target::Command(argv) => {
            let Some(program) = argv.first() else {
                return Err(Error::Invalid("no command given after --".into()));
            };
            let (c, g) = kernel::spawn_gated(argv)
                .map_err(|e| Error::Invalid(format!("cannot run {program}: {e}")))?;
            let pid = c.pid as i32;
            child = Some(c);
            gate = Some(g);
            (
                vec![pid],
                true,
                true,
                format!("command: {}", argv.join(" ")),
            )
        }
    };
    Ok(Tracee {
        pids,
        inherit,
        on_exec,
        desc,
        child,
        gate,
        cgroup,
    })
}

/// Opens a cgroup v2 directory (perf needs its fd). A path without
/// `cgroup.procs` is a usage error; the kernel checks the rest when the
/// events are opened.
fn open_cgroup(dir: &std::path::Path) -> Result<std::os::fd::OwnedFd, Error> {
    if !dir.join("cgroup.procs").exists() {
        return Err(Error::Invalid(format!(
            "--cgroup {}: not a cgroup v2 directory (no cgroup.procs; v2 is mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified)",
            dir.display()
        )));
    }
    std::fs::File::open(dir)
        .map(std::os::fd::OwnedFd::from)
        .map_err(|source| Error::Io {
            op: "open",
            path: dir.to_path_buf(),
            source,
        })
}

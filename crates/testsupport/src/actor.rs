//! The actor driver. Actors (crates/cli/tests/actors/*.c) are plain
//! programs doing IPC on command; they know nothing of mantle. A test
//! starts one, queues commands on its stdin ("SEQ WORKER COMMAND"), and
//! collects its reports ("ready PID MAIN W0 W1...", "SEQ ok|err|busy ...")
//! from a regular file: never a pipe or socket, because a tagged actor
//! writing into something the test reads would tag the test process, which
//! then tags every actor it starts afterwards.
//!
//! Also here: the fd plumbing tests use to give actors their channels.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::poll_until;

/// System call numbers as /proc/PID/task/TID/syscall shows them (x86-64),
/// for [`Actor::wait_blocked_in`].
pub const READ: &str = "0";
pub const MQ_TIMEDRECEIVE: &str = "243";

// ---------------------------------------------------------- fds, files

pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two fds pipe2/socketpair write.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the call succeeded, so both are fresh fds nobody else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

pub fn socketpair(ty: i32) -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two fds pipe2/socketpair write.
    let rc =
        unsafe { libc::socketpair(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: the call succeeded, so both are fresh fds nobody else owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: c is a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Opens a FIFO for writing once its reader has opened it (bounded wait).
pub fn open_fifo_writer(path: &Path) -> File {
    let f = poll_until(|| {
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .ok()
    })
    .unwrap_or_else(|| panic!("nobody opened FIFO {} for reading", path.display()));
    // SAFETY: F_SETFL on an fd the File owns (clears O_NONBLOCK); no memory involved.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, 0) };
    f
}

/// Makes the command's child see `src` as fd `dst` (and nothing else of ours:
/// every fd the tests make is close-on-exec).
pub fn pass_fds(cmd: &mut Command, fds: &[(RawFd, RawFd)]) {
    let fds = fds.to_vec();
    // SAFETY: the closure runs between fork and exec, so it calls only
    // async-signal-safe functions (dup2, fcntl) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &(src, dst) in &fds {
                if src == dst {
                    libc::fcntl(dst, libc::F_SETFD, 0);
                } else if libc::dup2(src, dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- actors

/// A running actor: commands in through a pipe (or FIFO), reports out
/// through a regular file.
pub struct Actor {
    pub name: String,
    /// Our child (killed with its process group on drop), or None for an
    /// actor another actor started (it dies with that actor's group).
    child: Option<Child>,
    pub pid: u32,
    pub main: u32,
    /// Worker thread tids.
    pub w: Vec<u32>,
    ctl: Box<dyn Write>,
    report: PathBuf,
    errlog: PathBuf,
    seq: u32,
    sent: HashMap<u32, String>,
    done: HashMap<u32, Result<String, String>>,
    /// Commands that reported "SEQ busy" (spin_recv is spinning).
    busy: BTreeSet<u32>,
    pos: usize,
}

impl Actor {
    /// Starts `cmd` as actor `name`, its report and stderr files in `dir`,
    /// leading its own process group; waits until it is ready.
    pub fn spawn(dir: &Path, name: &str, mut cmd: Command) -> Actor {
        let report = dir.join(format!("{name}.out"));
        let errlog = dir.join(format!("{name}.err"));
        cmd.stdin(Stdio::piped())
            .stdout(File::create(&report).unwrap())
            .stderr(File::create(&errlog).unwrap())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let ctl = Box::new(child.stdin.take().unwrap());
        let mut a = Actor::new(name, Some(child), ctl, report, errlog);
        a.ready();
        a
    }

    /// An actor already running: ours (`child`) or one another actor
    /// started (None), commanded through `ctl`, reporting into `report`.
    /// Call [`Actor::ready`] next.
    pub fn new(
        name: &str,
        child: Option<Child>,
        ctl: Box<dyn Write>,
        report: PathBuf,
        errlog: PathBuf,
    ) -> Actor {
        Actor {
            name: name.into(),
            child,
            pid: 0,
            main: 0,
            w: Vec::new(),
            ctl,
            report,
            errlog,
            seq: 0,
            sent: HashMap::new(),
            done: HashMap::new(),
            busy: BTreeSet::new(),
            pos: 0,
        }
    }

    /// Waits for "ready PID MAIN W0 W1...".
    pub fn ready(&mut self) {
        let line = poll_until(|| {
            let s = fs::read_to_string(&self.report).ok()?;
            let l = s.lines().find(|l| l.starts_with("ready "))?.to_string();
            Some(l)
        })
        .unwrap_or_else(|| panic!("{}", self.context("never became ready")));
        let n: Vec<u32> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        self.pid = n[0];
        self.main = n[1];
        self.w = n[2..].to_vec();
    }

    /// What went wrong, with the actor's last commands, reports and stderr.
    pub fn context(&self, what: &str) -> String {
        let tail = |s: String| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        let mut sent: Vec<_> = self.sent.iter().collect();
        sent.sort();
        let sent: Vec<String> = sent
            .iter()
            .rev()
            .take(30)
            .rev()
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        format!(
            "actor {} (pid {}): {what}\nlast commands:\n{}\nlast reports:\n{}\nstderr:\n{}",
            self.name,
            self.pid,
            sent.join("\n"),
            tail(fs::read_to_string(&self.report).unwrap_or_default()),
            tail(fs::read_to_string(&self.errlog).unwrap_or_default())
        )
    }

    /// Queues a command on worker `w`; returns its sequence number.
    pub fn send(&mut self, w: usize, cmd: &str) -> u32 {
        self.seq += 1;
        let seq = self.seq;
        self.sent.insert(seq, format!("@{w} {cmd}"));
        writeln!(self.ctl, "{seq} {w} {cmd}")
            .and_then(|_| self.ctl.flush())
            .unwrap_or_else(|e| panic!("{}", self.context(&format!("command {cmd}: {e}"))));
        seq
    }

    pub fn poll(&mut self) {
        let Ok(data) = fs::read(&self.report) else {
            return;
        };
        let Some(end) = data.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        if end < self.pos {
            return;
        }
        let text = String::from_utf8_lossy(&data[self.pos..=end]).into_owned();
        self.pos = end + 1;
        for l in text.lines() {
            let mut it = l.splitn(3, ' ');
            let (Some(seq), Some(st)) = (it.next(), it.next()) else {
                continue;
            };
            let Ok(seq) = seq.parse::<u32>() else {
                continue;
            };
            let rest = it.next().unwrap_or("").to_string();
            if st == "busy" {
                self.busy.insert(seq);
                continue;
            }
            self.done
                .insert(seq, if st == "ok" { Ok(rest) } else { Err(rest) });
        }
    }

    pub fn result(&mut self, seq: u32) -> Result<String, String> {
        let r = poll_until(|| {
            self.poll();
            self.done.remove(&seq)
        });
        match r {
            Some(r) => r,
            None => {
                let cmd = self.sent.get(&seq).cloned().unwrap_or_default();
                panic!("{}", self.context(&format!("no answer to `{cmd}`")))
            }
        }
    }

    /// Waits for command `seq`; it must succeed.
    #[track_caller]
    pub fn wait(&mut self, seq: u32) -> String {
        match self.result(seq) {
            Ok(s) => s,
            Err(e) => {
                let cmd = self.sent.get(&seq).cloned().unwrap_or_default();
                panic!("{}", self.context(&format!("`{cmd}` failed: {e}")))
            }
        }
    }

    #[track_caller]
    pub fn run(&mut self, w: usize, cmd: &str) -> String {
        let s = self.send(w, cmd);
        self.wait(s)
    }

    /// All the actor's threads: (label, tid).
    pub fn threads(&self) -> Vec<(String, u32)> {
        let mut v = vec![(format!("{}.main", self.name), self.main)];
        for (i, t) in self.w.iter().enumerate() {
            v.push((format!("{}.w{i}", self.name), *t));
        }
        v
    }

    /// Waits until command `seq` (spin_recv) reported that it spins.
    #[track_caller]
    pub fn wait_busy(&mut self, seq: u32) {
        let ok = poll_until(|| {
            self.poll();
            (self.busy.contains(&seq) || self.done.contains_key(&seq)).then_some(())
        });
        if ok.is_none() || !self.busy.contains(&seq) {
            panic!(
                "{}",
                self.context(&format!("command {seq} never started spinning"))
            );
        }
    }

    /// Waits until worker `w`, running command `seq`, sleeps in read(2)
    /// (per /proc/PID/task/TID/syscall and stat): for tests that need the
    /// reader blocked before the writer writes.
    #[track_caller]
    pub fn wait_blocked_in_read(&mut self, w: usize, seq: u32) {
        self.wait_blocked_in(w, seq, READ)
    }

    /// Like wait_blocked_in_read, for system call number `nr`.
    #[track_caller]
    pub fn wait_blocked_in(&mut self, w: usize, seq: u32, nr: &str) {
        let task = format!("/proc/{}/task/{}", self.pid, self.w[w]);
        let blocked = poll_until(|| {
            self.poll();
            if let Some(r) = self.done.get(&seq) {
                return Some(Err(r.clone()));
            }
            let sc = fs::read_to_string(format!("{task}/syscall")).ok()?;
            let st = fs::read_to_string(format!("{task}/stat")).ok()?;
            let state = st
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_string();
            (sc.split_whitespace().next() == Some(nr) && state == "S").then_some(Ok(()))
        });
        match blocked {
            Some(Ok(())) => {}
            Some(Err(r)) => panic!(
                "{}",
                self.context(&format!("command {seq} ended ({r:?}) instead of blocking"))
            ),
            None => panic!(
                "{}",
                self.context(&format!("command {seq} never blocked in system call {nr}"))
            ),
        }
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            // The actor leads its own process group: this also ends the
            // processes it forked.
            // SAFETY: kill(2) takes no pointers; the group is one we created.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        } else if self.pid != 0 {
            // SAFETY: kill(2) takes no pointers; the pid is one our actor started.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
    }
}

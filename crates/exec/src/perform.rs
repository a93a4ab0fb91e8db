//! Calls the executive performs on a guest's behalf (Decision::Perform on
//! the protected path): getppid, answered on the executive thread, and the
//! open family (open, openat, creat), done by a dedicated *opener* thread
//! with the guest's identity.
//!
//! Mechanism of an open: the opener thread has its own fs struct
//! (unshare(CLONE_FS)), so that it can take the guest's umask; when the
//! executive is root it also takes the guest's fsuid, fsgid and groups
//! with raw system calls (credentials are per thread in the kernel) and
//! gives them back afterwards. A relative path is resolved against the
//! guest's directory: /proc/TID/cwd (AT_FDCWD) or /proc/TID/fd/N (a
//! dirfd). The fd is installed in the guest and the call answered with its
//! number atomically (SECCOMP_IOCTL_NOTIF_ADDFD with ADDFD_FLAG_SEND). The
//! executive thread hands a request over and goes on serving; the opener
//! reports back through a channel and a wake-up pipe the loop polls.
//!
//! Limits: the guest's root (chroot) is not taken; a guest in another
//! mount namespace opens in the executive's.

use crate::agent::{Call, Decision};
use mantle_sys::seccomp::{Listener, SECCOMP_ADDFD_FLAG_SEND};
use mantle_sys::supervise;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// An open to perform.
pub struct OpenRequest {
    pub guest: usize,
    pub id: u64,
    pub call: Call,
    pub decision: Decision,
    pub listener: Arc<Listener>,
    pub dirfd: i32,
    pub path: CString,
    pub flags: i32,
    pub mode: u32,
    /// When the executive received the call.
    pub t0: Instant,
}

/// How it went.
pub struct OpenDone {
    pub guest: usize,
    pub call: Call,
    pub decision: Decision,
    /// The fd number in the guest, or -errno.
    pub result: i64,
    /// The answer could not be delivered: the call vanished.
    pub vanished: bool,
    pub kernel_ns: u64,
    pub t0: Instant,
}

/// The opener thread's handle.
pub struct Opener {
    pub tx: mpsc::Sender<OpenRequest>,
    pub rx: mpsc::Receiver<OpenDone>,
    /// Readable when a result waits in `rx`.
    pub wake: OwnedFd,
}

/// Starts the opener thread.
pub fn start_opener() -> std::io::Result<Opener> {
    let (req_tx, req_rx) = mpsc::channel::<OpenRequest>();
    let (done_tx, done_rx) = mpsc::channel::<OpenDone>();
    let (wake_r, wake_w) = supervise::pipe_nonblock()?;
    std::thread::Builder::new()
        .name("mantle-opener".into())
        .spawn(move || {
            let own_fs = supervise::unshare_fs().is_ok();
            let root = mantle_sys::os::geteuid() == 0;
            for r in req_rx {
                let d = open_as_guest(r, own_fs, root);
                if done_tx.send(d).is_err() {
                    break;
                }
                supervise::write_wake(wake_w.as_fd());
            }
        })?;
    Ok(Opener {
        tx: req_tx,
        rx: done_rx,
        wake: wake_r,
    })
}

/// The fs identity of a thread, from /proc/TID/status.
struct Identity {
    tgid: u32,
    fsuid: u32,
    fsgid: u32,
    groups: Vec<u32>,
    umask: Option<u32>,
}

fn identity(tid: u32) -> Option<Identity> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
    };
    let fourth = |name: &str| field(name)?.get(3)?.parse::<u32>().ok();
    Some(Identity {
        tgid: field("Tgid:")?.first()?.parse().ok()?,
        fsuid: fourth("Uid:")?,
        fsgid: fourth("Gid:")?,
        groups: field("Groups:")?
            .iter()
            .filter_map(|g| g.parse().ok())
            .collect(),
        umask: field("Umask:").and_then(|v| v.first().and_then(|m| u32::from_str_radix(m, 8).ok())),
    })
}

fn open_as_guest(r: OpenRequest, own_fs: bool, root: bool) -> OpenDone {
    let tid = r.call.tid;
    let k0 = Instant::now();
    let result: Result<OwnedFd, i32> = (|| {
        let who = identity(tid).ok_or(libc::ESRCH)?;
        let path = guest_proc_path(r.path.as_bytes(), who.tgid, tid);
        let path = CString::new(path).map_err(|_| libc::EINVAL)?;
        // where a relative path starts
        let relative = path.as_bytes().first() != Some(&b'/');
        // an absolute path starts at the guest's root, in its mount
        // namespace (a --redirect's binds, a chroot), never at ours
        let dir: Option<OwnedFd> = {
            let d = if !relative {
                format!("/proc/{tid}/root")
            } else if r.dirfd == libc::AT_FDCWD {
                format!("/proc/{tid}/cwd")
            } else if r.dirfd >= 0 {
                format!("/proc/{tid}/fd/{}", r.dirfd)
            } else {
                return Err(libc::EBADF);
            };
            let d = CString::new(d).map_err(|_| libc::EINVAL)?;
            Some(
                supervise::openat_raw(libc::AT_FDCWD, &d, libc::O_PATH | libc::O_DIRECTORY, 0)
                    .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?,
            )
        };
        let dirfd = dir.as_ref().map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
        let old_mask = match (own_fs, who.umask) {
            (true, Some(m)) => Some(supervise::set_umask(m)),
            _ => None,
        };
        let saved = if root {
            let groups = supervise::thread_groups().unwrap_or_default();
            supervise::set_thread_groups(&who.groups).map_err(|_| libc::EPERM)?;
            let gid = supervise::set_thread_fsgid(who.fsgid);
            let uid = supervise::set_thread_fsuid(who.fsuid);
            Some((uid, gid, groups))
        } else {
            None
        };
        // no /proc/PID/fd/N-style links: they would name the executive's
        // files when reached through /proc/self
        let opened = supervise::openat2_raw(
            dirfd,
            &path,
            r.flags,
            r.mode,
            supervise::RESOLVE_NO_MAGICLINKS
                | if relative {
                    0
                } else {
                    supervise::RESOLVE_IN_ROOT
                },
        );
        if let Some((uid, gid, groups)) = saved {
            supervise::set_thread_fsuid(uid);
            supervise::set_thread_fsgid(gid);
            let _ = supervise::set_thread_groups(&groups);
        }
        if let Some(m) = old_mask {
            supervise::set_umask(m);
        }
        let fd = opened.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        if names_the_executive(&fd) {
            return Err(libc::EACCES);
        }
        Ok(fd)
    })();
    let kernel_ns = k0.elapsed().as_nanos() as u64;
    let (result, vanished) = match result {
        Ok(fd) => {
            let cloexec = if r.flags & libc::O_CLOEXEC != 0 {
                libc::O_CLOEXEC as u32
            } else {
                0
            };
            match r
                .listener
                .addfd(r.id, fd.as_fd(), 0, SECCOMP_ADDFD_FLAG_SEND, cloexec)
            {
                Ok(n) => (i64::from(n), false),
                Err(e) if e.errno() == Some(libc::ENOENT) => (-i64::from(libc::ENOENT), true),
                Err(e) => {
                    let errno = e.errno().unwrap_or(libc::EIO);
                    let v = r.listener.reply_error(r.id, errno).is_err();
                    (-i64::from(errno), v)
                }
            }
        }
        Err(errno) => {
            let v = r.listener.reply_error(r.id, errno).is_err();
            (-i64::from(errno), v)
        }
    };
    OpenDone {
        guest: r.guest,
        call: r.call,
        decision: r.decision,
        result,
        vanished,
        kernel_ns,
        t0: r.t0,
    }
}

/// /proc/self and /proc/thread-self at the start of a guest's path name
/// the *guest's* /proc directory (the executive opens, and would otherwise
/// open its own).
pub fn guest_proc_path(p: &[u8], tgid: u32, tid: u32) -> Vec<u8> {
    let swap = |prefix: &[u8], with: String| -> Option<Vec<u8>> {
        let rest = p.strip_prefix(prefix)?;
        if !rest.is_empty() && rest[0] != b'/' {
            return None;
        }
        let mut v = with.into_bytes();
        v.extend_from_slice(rest);
        Some(v)
    };
    swap(b"/proc/self", format!("/proc/{tgid}"))
        .or_else(|| swap(b"/proc/thread-self", format!("/proc/{tgid}/task/{tid}")))
        .unwrap_or_else(|| p.to_vec())
}

/// Whether an opened file is in the executive's own /proc directory
/// (reached through a symbolic link to /proc/self: refused).
fn names_the_executive(fd: &OwnedFd) -> bool {
    let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
        return false;
    };
    let t = target.to_string_lossy();
    let me = std::process::id();
    let Some(rest) = t.strip_prefix("/proc/") else {
        return false;
    };
    let first = rest.split('/').next().unwrap_or("");
    let Ok(n) = first.parse::<u32>() else {
        return false;
    };
    n == me || std::path::Path::new(&format!("/proc/{me}/task/{n}")).exists()
}

/// The open family's arguments (dirfd, path address, flags, mode) of a
/// call, if it is one the opener can perform.
pub fn open_args(nr: &str, a: &[u64; 6]) -> Option<(i32, u64, i32, u32, usize)> {
    match nr {
        "open" => Some((libc::AT_FDCWD, a[0], a[1] as i32, a[2] as u32, 0)),
        "openat" => Some((a[0] as i32, a[1], a[2] as i32, a[3] as u32, 1)),
        "creat" => Some((
            libc::AT_FDCWD,
            a[0],
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            a[1] as u32,
            0,
        )),
        _ => None,
    }
}

/// The guest's parent pid as the executive knows it: the executive itself
/// for a guest's first process; else PPid of /proc/TID/status, cached per
/// tid with a pidfd of the caller's thread and of that parent. A cached
/// answer is used only while neither has exited (one poll of the two
/// pidfds, no /proc read): when the parent dies the kernel re-parents the
/// caller (to the reaper, mantle's subreaper), and when the caller's thread
/// dies its tid may name another task; either way /proc is read again.
pub struct Parents {
    /// The executive's pid, read once (getpid is a system call).
    me: i32,
    cache: Vec<Cached>,
}

struct Cached {
    tid: u32,
    ppid: i32,
    /// The caller's thread and its parent: readable once exited.
    watch: Option<(OwnedFd, OwnedFd)>,
}

/// How many callers are remembered (the oldest is forgotten first).
const PARENTS_CACHED: usize = 256;

impl Default for Parents {
    fn default() -> Self {
        Parents {
            me: std::process::id() as i32,
            cache: Vec::with_capacity(PARENTS_CACHED),
        }
    }
}

impl Parents {
    pub fn of(&mut self, tid: u32, tgid_is_guest_root: bool) -> i32 {
        if tgid_is_guest_root {
            return self.me;
        }
        if let Some(k) = self.cache.iter().position(|c| c.tid == tid) {
            if Self::unchanged(&self.cache[k]) {
                return self.cache[k].ppid;
            }
            self.cache.swap_remove(k);
        }
        let ppid = read_ppid(tid).unwrap_or(0);
        // Watch both; without pidfds (an old kernel) nothing is cached.
        let watch = mantle_sys::os::pidfd_open(tid, true).ok().and_then(|t| {
            let p = mantle_sys::os::pidfd_open(ppid as u32, false).ok()?;
            Some((t, p))
        });
        // the parent may have died between the read and its pidfd: the
        // pidfd then names nothing (ESRCH) and nothing is cached
        if watch.is_some() && read_ppid(tid) == Some(ppid) {
            if self.cache.len() == PARENTS_CACHED {
                self.cache.remove(0);
            }
            self.cache.push(Cached { tid, ppid, watch });
        }
        ppid
    }

    fn unchanged(c: &Cached) -> bool {
        let Some((t, p)) = &c.watch else {
            return false;
        };
        let mut fds = [
            libc::pollfd {
                fd: t.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: p.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        matches!(supervise::poll(&mut fds, 0), Ok(0))
    }
}

/// PPid of /proc/TID/status.
fn read_ppid(tid: u32) -> Option<i32> {
    status_field(tid, "PPid:")
}

/// A numeric field (`PPid:`, `Tgid:`) of /proc/TID/status.
pub fn status_field(tid: u32, key: &str) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse::<i32>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_follow_a_reparented_caller() {
        use std::io::BufRead;
        // sh (A) starts sleep (B) and waits: B's parent is A, until A dies
        let mut a = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(a.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let b: u32 = line.trim().parse().unwrap();
        let mut parents = Parents::default();
        assert_eq!(
            parents.of(b, true),
            std::process::id() as i32,
            "a guest's first process"
        );
        assert_eq!(parents.of(b, false), a.id() as i32);
        assert_eq!(parents.of(b, false), a.id() as i32, "cached");
        assert_eq!(parents.cache.len(), 1);
        a.kill().unwrap();
        a.wait().unwrap();
        let now = read_ppid(b).unwrap();
        assert_ne!(now, a.id() as i32, "the kernel re-parented B");
        assert_eq!(parents.of(b, false), now, "the cache noticed");
        let _ = supervise::kill(b as i32, libc::SIGKILL);
    }

    #[test]
    fn proc_self_is_the_guests() {
        assert_eq!(
            guest_proc_path(b"/proc/self/status", 7, 9),
            b"/proc/7/status"
        );
        assert_eq!(guest_proc_path(b"/proc/self", 7, 9), b"/proc/7");
        assert_eq!(
            guest_proc_path(b"/proc/thread-self/comm", 7, 9),
            b"/proc/7/task/9/comm"
        );
        assert_eq!(guest_proc_path(b"/proc/selfish", 7, 9), b"/proc/selfish");
        assert_eq!(guest_proc_path(b"rel/proc/self", 7, 9), b"rel/proc/self");
    }
}

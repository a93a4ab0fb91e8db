//! `mantle exec status`: what each running executive publishes about
//! itself and its guests, and how to find it. Mechanism: each executive
//! writes one JSON file, `<pid>.json`, in /run/mantle/exec/ (root) or
//! $XDG_RUNTIME_DIR/mantle/exec/ (a user; /tmp/mantle-UID/exec/ without
//! XDG_RUNTIME_DIR), directory 0700 and file 0600, replaced atomically
//! (write a temporary file, rename) at most every 100 ms, by a thread of
//! its own ([`Publisher`], at normal priority): the executive's thread only
//! hands it a snapshot and never waits on the file system (a write took
//! hundreds of microseconds, and a call arriving meanwhile waited: a
//! guest's 50 ms sleep came back 0.2-0.3 ms late); removed at exit.
//!
//! Trust: the file is the executive's claim, readable by its owner only.
//! Another user cannot read it (0600 in a 0700 directory); the owner can
//! write anything into it, which fools only their own `exec status` (the
//! reader checks that the pid is alive and is a mantle process, and skips
//! files it cannot parse). Nothing reads these files back into an
//! executive.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The schema name in every status file.
pub const SCHEMA: &str = "mantle.exec.status/1";

/// One executive.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ExecStatus {
    pub schema: String,
    pub pid: u32,
    pub uid: u32,
    pub path: String,
    /// SCHED_FIFO priority of the executive thread, or null (not allowed).
    pub priority: Option<i32>,
    pub memory_locked: bool,
    pub sync_wake_up: bool,
    pub fail_open: bool,
    pub started_unix_ms: u64,
    pub updated_unix_ms: u64,
    pub guests: Vec<GuestStatus>,
    /// The executive on N CPUs: its design, "giant" or "fine" (absent in
    /// files of older executives and of the fast path).
    #[serde(default)]
    pub locking: Option<String>,
    /// The CPUs it has a thread on (empty: one thread, unpinned).
    #[serde(default)]
    pub executive_cpus: Vec<usize>,
    /// Its locks' statistics (crate::lockstat), always counted.
    #[serde(default)]
    pub locks: Vec<crate::lockstat::LockStats>,
}

/// One guest of an executive.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GuestStatus {
    pub name: String,
    pub pid: u32,
    pub command: Vec<String>,
    /// starting, running, exited, killed, not-started
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub agents: Vec<String>,
    pub calls: Vec<CallStat>,
    /// Notifications that vanished (the caller was killed or interrupted).
    pub vanished: u64,
    /// Calls held now (Delay).
    pub held: u64,
    /// Total time spent in the executive on this guest's calls, ns.
    pub executive_ns: u64,
    /// How the executive schedules it, when it dispatches (absent in
    /// files of older executives).
    #[serde(default)]
    pub sched: Option<crate::sched::Params>,
    /// Time it was dispatched (thawed and runnable), ns.
    #[serde(default)]
    pub dispatched_ns: u64,
    /// The CPU it is dispatched on, when the executive dispatches.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// The executive thread that serves it (index in `executive_cpus`).
    #[serde(default)]
    pub executive_thread: Option<usize>,
}

/// Interposed calls of one name.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallStat {
    pub name: String,
    pub count: u64,
    pub executive_ns: u64,
    pub kernel_ns: u64,
}

/// The directory of status files for this user.
pub fn dir() -> PathBuf {
    if mantle_sys::os::geteuid() == 0 {
        return PathBuf::from("/run/mantle/exec");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("mantle/exec"),
        _ => PathBuf::from(format!("/tmp/mantle-{}/exec", mantle_sys::os::geteuid())),
    }
}

/// Writes `s` as `dir/<pid>.json` (0600), atomically.
pub fn publish(dir: &Path, s: &ExecStatus) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // the directory and its parent must be ours and closed to others (in
    // /tmp another user could have made them first, to read or redirect
    // what we write)
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        private_dir(d)?;
    }
    let tmp = dir.join(format!(".{}.json.tmp", s.pid));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(s).map_err(std::io::Error::other)?)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(format!("{}.json", s.pid)))
}

/// Writes the statuses it is offered, from a thread of its own.
pub struct Publisher {
    tx: Option<std::sync::mpsc::SyncSender<ExecStatus>>,
    thread: Option<std::thread::JoinHandle<Option<std::io::Error>>>,
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Publisher {
    /// Starts the thread. Start it before the caller takes SCHED_FIFO:
    /// the thread keeps the caller's policy at creation.
    pub fn start(dir: PathBuf) -> std::io::Result<Publisher> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<ExecStatus>(1);
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = failed.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-status".into())
            .spawn(move || {
                for s in rx {
                    if let Err(e) = publish(&dir, &s) {
                        f.store(true, std::sync::atomic::Ordering::SeqCst);
                        return Some(e);
                    }
                }
                None
            })?;
        Ok(Publisher {
            tx: Some(tx),
            thread: Some(thread),
            failed,
        })
    }

    /// Hands `s` to the thread; false (and nothing done) while it is still
    /// writing the previous one or after it failed.
    pub fn offer(&self, s: ExecStatus) -> bool {
        self.tx.as_ref().is_some_and(|t| t.try_send(s).is_ok())
    }

    /// Whether a write failed (the thread then stopped).
    pub fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops the thread after its last write; the error that stopped it.
    pub fn finish(mut self) -> Option<std::io::Error> {
        drop(self.tx.take());
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

/// Refuses a directory that is a symbolic link, is not the caller's, or
/// that others may write (root's /run is root's and 0755: allowed).
fn private_dir(d: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(d)?;
    let me = mantle_sys::os::geteuid();
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of uid {me} (a link, another owner, or writable by others)",
                d.display()
            ),
        ));
    }
    Ok(())
}

/// Removes this executive's file.
pub fn unpublish(dir: &Path, pid: u32) {
    let _ = std::fs::remove_file(dir.join(format!("{pid}.json")));
}

/// The running executives whose files are in `dir` (files that do not
/// parse are skipped; stale files of executives that no longer exist are
/// removed), by pid.
pub fn list(dir: &Path) -> Vec<ExecStatus> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<ExecStatus> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid: u32 = name.strip_suffix(".json")?.parse().ok()?;
            if !Path::new(&format!("/proc/{pid}")).exists() {
                // an executive that could not clean up (its reaper was
                // killed too): the file goes
                let _ = std::fs::remove_file(e.path());
                return None;
            }
            let s: ExecStatus = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            (s.pid == pid && s.schema == SCHEMA && alive(pid)).then_some(s)
        })
        .collect();
    v.sort_by_key(|s| s.pid);
    v
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "mantle")
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_files_round_trip_and_stale_ones_are_skipped() {
        let top = std::env::temp_dir().join(format!("mantle-status-test-{}", std::process::id()));
        let d = top.join("exec");
        let mut s = ExecStatus {
            schema: SCHEMA.into(),
            pid: 1, // pid 1 is not a mantle process: skipped
            uid: 0,
            path: "protected".into(),
            priority: None,
            memory_locked: false,
            sync_wake_up: true,
            fail_open: false,
            started_unix_ms: 1,
            updated_unix_ms: 2,
            guests: vec![],
            locking: Some("fine".into()),
            executive_cpus: vec![0, 1],
            locks: vec![crate::lockstat::LockStats {
                name: "runqueue cpu0".into(),
                acquisitions: 3,
                hold_hist: vec![0, 3],
                ..Default::default()
            }],
        };
        publish(&d, &s).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("1.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(list(&d).is_empty());
        s.pid = 2;
        let back: ExecStatus = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        // a directory others may write is refused
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(publish(&d, &s).is_err());
        let _ = std::fs::remove_dir_all(&top);
    }
}

//! The fast path's door: how a guest process that lost the region's fd
//! gets it back, while the executive stays non-dumpable.
//!
//! Why: a program may close every fd but 0–2 before it execs a child
//! (python's `subprocess` does), and the stub in the child's new image then
//! has no region to map. Reopening through `/proc/EXEC/fd/N` needs ptrace
//! read access to the executive, i.e. a dumpable executive, which lets its
//! guests read its /proc files and, without Yama, ptrace it (issue 10: the
//! guests cannot touch the executive).
//!
//! Mechanism: a unix stream socket in a directory of its own, created
//! with mode 0700 and a random name in the temporary directory (so only
//! the executive's user, and root, can even reach the socket). For each
//! connection the kernel's SO_PEERCRED names the connecting process; if it
//! belongs to the guest tree (the same check as a slot's new owner,
//! [`super::server::in_tree`]) it receives the region's fd (SCM_RIGHTS,
//! inheritable, so its next exec passes it on), otherwise the connection
//! is closed with nothing sent. A thread of its own serves it (accept
//! blocks; this is not the interposition path); dropping the [`Door`]
//! stops the thread and removes the socket and its directory.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The socket that hands the region's fd to guest processes.
pub struct Door {
    dir: PathBuf,
    sock: PathBuf,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the door's thread and its owner share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// The guest tree's root pid (0 until the guest runs: nobody admitted).
    root: AtomicU32,
    /// Connections answered with the fd, and refused.
    given: AtomicU64,
    refused: AtomicU64,
}

impl Door {
    /// Opens the door; it admits nobody until [`Door::set_root`].
    pub fn open(region_fd: OwnedFd) -> io::Result<Door> {
        let base = std::env::temp_dir();
        let mut dir = None;
        for _ in 0..8 {
            let d = base.join(format!(
                "mantle-fast.{}.{:016x}",
                std::process::id(),
                mantle_sys::os::random_u64()?
            ));
            // mkdir does not follow a planted symlink, and fails if the
            // name exists: the directory is ours, 0700
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {
                    dir = Some(d);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        let dir = dir.ok_or_else(|| io::Error::other("no free name for the door's directory"))?;
        let sock = dir.join("region");
        let listener = match UnixListener::bind(&sock) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-door".into())
            .spawn(move || serve(listener, region_fd, &s));
        match thread {
            Ok(t) => Ok(Door {
                dir,
                sock,
                shared,
                thread: Some(t),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&sock);
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The socket's path (the stub reads it from `MANTLE_FAST_DOOR`).
    pub fn path(&self) -> &Path {
        &self.sock
    }

    /// Admits the processes of the tree rooted at `root`.
    pub fn set_root(&self, root: u32) {
        self.shared.root.store(root, Ordering::SeqCst);
    }

    /// Connections that received the fd, and those refused.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.given.load(Ordering::Relaxed),
            self.shared.refused.load(Ordering::Relaxed),
        )
    }
}

fn serve(listener: UnixListener, fd: OwnedFd, shared: &Shared) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let root = shared.root.load(Ordering::SeqCst);
        let admitted = root != 0
            && mantle_sys::supervise::peer_cred(conn.as_fd())
                .is_ok_and(|(pid, _)| super::server::in_tree(pid, root));
        if admitted && mantle_sys::supervise::send_fd(conn.as_fd(), fd.as_raw_fd()).is_ok() {
            shared.given.fetch_add(1, Ordering::Relaxed);
        } else {
            shared.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // wake the accept with a connection of our own
        let _ = UnixStream::connect(&self.sock);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.sock);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

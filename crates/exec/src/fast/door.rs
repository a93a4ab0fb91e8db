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
//! Mechanism: a unix stream socket with a random *abstract* name
//! (`@mantle-fast.PID.RANDOM`: nothing in the filesystem, so nothing is
//! left behind however the executive ends, kill -9 included). Anyone in
//! the network namespace may connect; that gives nothing: for each
//! connection the kernel's SO_PEERCRED names the connecting process, and
//! only if it belongs to the guest tree (the same check as a slot's new
//! owner, `super::server::in_tree`) it receives the region's fd
//! (SCM_RIGHTS, inheritable, so its next exec passes it on); otherwise the
//! connection is closed with nothing sent. (A directory of mode 0700 in
//! `$TMPDIR` held the socket before; it added nothing to that check and
//! was left behind when the executive was killed.) A thread of its own
//! serves it (accept blocks; this is not the interposition path; it
//! blocks the signals a supervisor catches, so they interrupt the main
//! thread's wait instead); dropping the [`Door`] stops the thread and the
//! name is gone with the socket.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The socket that hands the region's fd to guest processes.
pub struct Door {
    /// `@` + the abstract name, as the stub reads it from `MANTLE_FAST_DOOR`.
    env: String,
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
        let mut bound = None;
        for _ in 0..8 {
            let name = format!(
                "mantle-fast.{}.{:016x}",
                std::process::id(),
                mantle_sys::os::random_u64()?
            );
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            match UnixListener::bind_addr(&addr) {
                Ok(l) => {
                    bound = Some((name, l));
                    break;
                }
                // 64 random bits: taken only if someone planted it
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
        let (name, listener) =
            bound.ok_or_else(|| io::Error::other("no free name for the door"))?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mantle-door".into())
            .spawn(move || serve(listener, region_fd, &s))?;
        Ok(Door {
            env: format!("@{name}"),
            shared,
            thread: Some(thread),
        })
    }

    /// The door's address as `MANTLE_FAST_DOOR` gives it to the stub:
    /// `@` and the abstract name.
    pub fn address(&self) -> &str {
        &self.env
    }

    /// Connects to the door (a process outside the guest tree is refused:
    /// closed with nothing sent).
    pub fn connect(address: &str) -> io::Result<UnixStream> {
        let name = address.strip_prefix('@').ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "not an abstract address")
        })?;
        UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)
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
    // a supervisor's signals are for its main thread's wait
    let _ = mantle_sys::supervise::block_signals_here(&[
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
    ]);
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
        let _ = Door::connect(&self.env);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_door_is_abstract_and_refuses_strangers() {
        let (r, _w) = mantle_sys::os::pipe().unwrap();
        let door = Door::open(r).unwrap();
        assert!(door.address().starts_with("@mantle-fast."));
        assert!(!std::path::Path::new(&door.address()[1..]).exists());
        // nobody admitted yet (root 0): closed with nothing sent
        let mut c = Door::connect(door.address()).unwrap();
        let mut b = [0u8; 1];
        use std::io::Read;
        assert_eq!(c.read(&mut b).unwrap(), 0);
        let a = door.address().to_string();
        drop(door);
        assert!(Door::connect(&a).is_err(), "gone with the door");
    }
}

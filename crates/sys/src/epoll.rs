//! epoll(7): a wait set registered once, for a loop that waits on the same
//! fds many times.
//!
//! Why not poll(2): poll adds the caller to every fd's wait queue and
//! removes it again on each call, so its cost grows with the number of fds
//! on every wait. The executive waits once per interposed call over every
//! guest's listener, pidfd and status pipe: with epoll the registration is
//! paid once and a wait costs the same for one fd or a hundred (issue 10:
//! the executive's cost above the bare seccomp-notification round trip).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A timeout as the kernel takes it.
fn timespec(d: std::time::Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// How many fds a wait reported: EINTR (a signal) is none, other errors
/// are errors.
fn waited(n: libc::c_int) -> io::Result<usize> {
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::Interrupted {
        Ok(0)
    } else {
        Err(e)
    }
}

/// One ready fd: the token given at [`Epoll::add`] and its events
/// (`libc::EPOLLIN`, `EPOLLHUP`, `EPOLLERR`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub token: u64,
    pub events: u32,
}

/// An epoll instance (close-on-exec) and a buffer of ready events
/// allocated once.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    buf: Vec<libc::epoll_event>,
}

impl std::os::fd::AsFd for Epoll {
    /// The epoll instance itself: pollable, so one wait set can hold
    /// another.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Epoll {
    /// A new instance that returns up to `max_ready` fds per wait.
    pub fn new(max_ready: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            // SAFETY: fd was just returned by the kernel and is ours alone.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; max_ready.max(1)],
        })
    }

    fn ctl(&self, op: i32, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev is a valid epoll_event for the duration of the call
        // (ignored by EPOLL_CTL_DEL).
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for readability (and hang-up, error), reported with
    /// `token`. The fd must stay open until [`Epoll::remove`]: epoll
    /// forgets an fd only when its last reference closes.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            token,
            libc::EPOLLIN as u32,
        )
    }

    /// Watches `fd` for readability once (EPOLLONESHOT): after one report
    /// it stays in the set but silent until [`Epoll::rearm`]. For fds that
    /// stay readable while nobody wants them read (a socket whose reader
    /// is not waiting): level-triggered, they would wake every wait.
    pub fn add_oneshot(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            token,
            (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
        )
    }

    /// Arms a oneshot fd again.
    pub fn rearm(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_MOD,
            fd.as_raw_fd(),
            token,
            (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
        )
    }

    /// Stops watching `fd` (ENOENT, not watched, is not an error).
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        match self.ctl(libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the ready fds;
    /// EINTR returns none.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<impl Iterator<Item = Ready> + '_> {
        let t = (timeout_ms >= 0).then(|| std::time::Duration::from_millis(timeout_ms as u64));
        self.wait_for(t)
    }

    /// Waits up to `timeout` (None: forever), to the nanosecond
    /// (epoll_pwait2, Linux 5.11: a held call is answered when it is due,
    /// not at the next millisecond), and returns the ready fds; EINTR
    /// returns none.
    pub fn wait_for(
        &mut self,
        timeout: Option<std::time::Duration>,
    ) -> io::Result<impl Iterator<Item = Ready> + '_> {
        let ts = timeout.map(timespec);
        let tp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: buf holds buf.len() writable epoll_event structs; tp is
        // null or points to ts, alive for the call; no signal mask.
        let n = unsafe {
            libc::epoll_pwait2(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr(),
                self.buf.len() as i32,
                tp,
                std::ptr::null(),
            )
        };
        let n = waited(n)?;
        Ok(self.buf[..n].iter().map(|e| Ready {
            token: e.u64,
            events: e.events,
        }))
    }
}

/// The same interface as [`Epoll`] over ppoll(2): the set is kept, and
/// each wait passes it whole.
///
/// Why both: a wake-up through epoll loses the waker's flags. The seccomp
/// listener's SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP wakes its waiter with
/// WF_CURRENT_CPU (on the notifying guest's CPU); a poll(2) waiter sits on
/// the listener's own wait queue and gets that wake-up as is, but an epoll
/// waiter is woken again by epoll's callback, without the flag. Measured
/// (bench/executive, free condition, executive at SCHED_OTHER): 12.4 µs per
/// round trip waiting in epoll, against 5.96 µs for a C supervisor waiting
/// in poll. For a handful of fds poll's per-wait cost is below a
/// microsecond's tenth here; the executive waits with this.
#[derive(Debug, Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
    tokens: Vec<u64>,
    ready: Vec<Ready>,
}

impl PollSet {
    /// An empty set with room for `cap` fds.
    pub fn new(cap: usize) -> PollSet {
        PollSet {
            fds: Vec::with_capacity(cap),
            tokens: Vec::with_capacity(cap),
            ready: Vec::with_capacity(cap),
        }
    }

    /// Watches `fd` for readability (and hang-up, error), reported with
    /// `token`; the fd must stay open until [`PollSet::remove`].
    pub fn add(&mut self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.fds.push(libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.tokens.push(token);
        Ok(())
    }

    /// Stops watching `fd` (not watched: nothing happens).
    pub fn remove(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        if let Some(k) = self.fds.iter().position(|p| p.fd == fd.as_raw_fd()) {
            self.fds.swap_remove(k);
            self.tokens.swap_remove(k);
        }
        Ok(())
    }

    /// Waits up to `timeout` (None: forever), to the nanosecond (ppoll),
    /// and returns the ready fds (`events` in epoll's bits, which are
    /// poll's); EINTR returns none.
    pub fn wait_for(
        &mut self,
        timeout: Option<std::time::Duration>,
    ) -> io::Result<impl Iterator<Item = Ready> + '_> {
        let ts = timeout.map(timespec);
        let tp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: fds is a valid array of fds.len() pollfd structs; tp is
        // null or points to ts, alive for the call; no signal mask.
        let n = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                tp,
                std::ptr::null(),
            )
        };
        self.ready.clear();
        if waited(n)? > 0 {
            for (p, &t) in self.fds.iter().zip(&self.tokens) {
                if p.revents != 0 {
                    self.ready.push(Ready {
                        token: t,
                        events: p.revents as u16 as u32,
                    });
                }
            }
        }
        Ok(self.ready.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_poll_set_reports_like_the_epoll_set() {
        let mut ps = PollSet::new(4);
        let pipes: Vec<(OwnedFd, OwnedFd)> = (0..3)
            .map(|_| crate::supervise::pipe_nonblock().unwrap())
            .collect();
        for (i, (r, _)) in pipes.iter().enumerate() {
            ps.add(r.as_fd(), 100 + i as u64).unwrap();
        }
        let none = std::time::Duration::ZERO;
        assert_eq!(ps.wait_for(Some(none)).unwrap().count(), 0);
        crate::supervise::write_wake(pipes[1].1.as_fd());
        let ready: Vec<Ready> = ps
            .wait_for(Some(std::time::Duration::from_secs(1)))
            .unwrap()
            .collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].token, 101);
        assert_ne!(ready[0].events & libc::EPOLLIN as u32, 0);
        ps.remove(pipes[1].0.as_fd()).unwrap();
        assert_eq!(ps.wait_for(Some(none)).unwrap().count(), 0, "removed");
        let mut pipes = pipes;
        let (_r2, w2) = pipes.pop().unwrap();
        drop(w2);
        let ready: Vec<Ready> = ps.wait_for(Some(none)).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].token, 102);
        assert_ne!(ready[0].events & libc::EPOLLHUP as u32, 0);
    }

    #[test]
    fn reports_each_ready_fd_by_its_token_and_forgets_removed_ones() {
        let mut ep = Epoll::new(4).unwrap();
        let pipes: Vec<(OwnedFd, OwnedFd)> = (0..3)
            .map(|_| crate::supervise::pipe_nonblock().unwrap())
            .collect();
        for (i, (r, _)) in pipes.iter().enumerate() {
            ep.add(r.as_fd(), 100 + i as u64).unwrap();
        }
        assert_eq!(ep.wait(0).unwrap().count(), 0, "nothing written yet");
        crate::supervise::write_wake(pipes[1].1.as_fd());
        let ready: Vec<Ready> = ep.wait(1000).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].token, 101);
        assert_ne!(ready[0].events & libc::EPOLLIN as u32, 0);
        // level-triggered: still ready until drained
        assert_eq!(ep.wait(0).unwrap().count(), 1);
        ep.remove(pipes[1].0.as_fd()).unwrap();
        assert_eq!(
            ep.wait(0).unwrap().count(),
            0,
            "removed fds are not reported"
        );
        ep.remove(pipes[1].0.as_fd()).unwrap();
        // a hang-up is reported with the token too
        let mut pipes = pipes;
        let (_r2, w2) = pipes.pop().unwrap();
        drop(w2);
        let ready: Vec<Ready> = ep.wait(1000).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].token, 102);
        // a timeout in ns is kept to well under a millisecond's rounding
        let _ = ep.remove(pipes[0].0.as_fd());
        drop(pipes);
        let mut ep = Epoll::new(1).unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(
            ep.wait_for(Some(std::time::Duration::from_micros(300)))
                .unwrap()
                .count(),
            0
        );
        let waited = t0.elapsed();
        assert!(
            waited >= std::time::Duration::from_micros(300),
            "{waited:?}"
        );
        assert_ne!(ready[0].events & libc::EPOLLHUP as u32, 0);
    }
}

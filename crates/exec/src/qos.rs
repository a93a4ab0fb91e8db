//! QoS I/O: the executive reads the guests' sockets on their behalf, by
//! the token scheduler of the paper's Figure 7 (seeds/001 section 3.3).
//!
//! A guest with a reservation (`qos = N` items per second in a system file,
//! or `qos = "best-effort"`) has its `read` and `recvfrom` on sockets held
//! by the executive. The executive keeps a duplicate of the socket
//! (pidfd_getfd) in an epoll set of its own, and whenever it may (a call
//! held, data arrived, a new period) it decides with
//! [`crate::sched::tokens::Tokens`]: the most important guest that has a
//! held read, data and tokens left is served, else the best-effort one
//! (unless a reserved guest with tokens is busy with the item it was just
//! given: then nobody, for at most `BUSY`); a
//! read is one datagram, taken non-blocking from the duplicate into the
//! guest's buffer (process_vm_writev, after re-validating the call) and
//! answered with its length, one token spent. A reserved guest out of
//! tokens waits for the next period even when the CPU is free (Figure 7
//! is not work-conserving).
//!
//! Trust: the fd number and buffer are the guest's claims: the fd is
//! duplicated from the calling process and compared with the cached
//! duplicate by kcmp on every call (a closed and reused number is never
//! read through an old socket); a buffer the executive cannot write fails
//! the call with EFAULT.
//!
//! Left to the kernel (Continue): reads of anything but a socket, and
//! recvfrom with a source address asked for or with flags other than
//! MSG_DONTWAIT. Not done: recvmsg, recvmmsg; a stream socket is read one
//! `recv` at a time like a datagram.

use crate::sched::tokens::{Reserve, Tokens};
use crate::sched::TaskId;
use mantle_sys::epoll::Epoll;
use mantle_sys::seccomp::Listener;
use mantle_sys::supervise;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Sockets watched per guest at most.
const SOCKETS: usize = 16;

/// How long after a reserved guest's read was answered with data it
/// counts as busy with that item: while it has tokens and its socket may
/// hold more, Figure 7 lets *it* run, so the best-effort guest is not read
/// for meanwhile (reading for it gave the best effort CPU the reserved
/// guest needed: task0 got 94.4% of its reservation in overload, the
/// best-effort one 561 packets/s). Bounded, so that a reserved guest that
/// stops reading does not starve the best effort past this.
const BUSY: Duration = Duration::from_millis(1);

/// A guest's read held by the executive.
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: u64,
    tid: u32,
    /// Index into the guest's sockets.
    sock: usize,
    buf: u64,
    len: usize,
    nonblock: bool,
}

struct Sock {
    /// The caller's pid and fd number, and our duplicate.
    pid: u32,
    fd: i32,
    dup: OwnedFd,
    /// Its token in the epoll set (oneshot: armed only while a read
    /// waits on it and it was found empty).
    token: u64,
    /// Known empty until epoll says otherwise.
    dry: bool,
}

struct Guest {
    reserve: Reserve,
    socks: Vec<Sock>,
    pending: std::collections::VecDeque<Pending>,
    /// When a read of it was last answered with data (ns since epoch).
    served_ns: Option<u64>,
}

/// What the QoS reader counted.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct QosStats {
    /// Items read on each guest's behalf.
    pub items: Vec<u64>,
    /// Reads handed to the kernel (not a socket, or flags not handled).
    pub passed: u64,
}

/// A guest's reservation as written: items per second, or the surplus.
/// Guests with larger rates are served first (the paper's tasks "sorted
/// from highest QoS to lowest").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    PerSecond(u64),
    BestEffort,
}

/// The executive's QoS reader.
pub struct Qos {
    tokens: Tokens,
    epoch: Instant,
    period: Duration,
    guests: Vec<Option<Guest>>,
    ep: Epoll,
    buf: Vec<u8>,
    /// tid → thread group, for the callers seen (checked by kcmp below).
    tgids: Vec<(u32, u32)>,
    /// This process (kcmp's other side).
    me: u32,
    /// When the tokens are refreshed next (ns since `epoch`), as of the
    /// last decision.
    next_refresh: u64,
    pub stats: QosStats,
}

/// Why a call is not the QoS reader's.
pub enum NotMine {
    /// Not a read of a socket by a reserved guest: decide it as usual.
    Pass,
}

impl Qos {
    /// A reader with a token period; `rates[i]`: guest i's reservation
    /// (None: no QoS for it).
    pub fn new(period: Duration, rates: &[Option<Rate>]) -> std::io::Result<Qos> {
        let mut tokens = Tokens::new(period.as_nanos() as u64, 0)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut guests = Vec::with_capacity(rates.len());
        for (i, r) in rates.iter().enumerate() {
            guests.push(match r {
                Some(r) => {
                    let r = match *r {
                        Rate::PerSecond(n) => Reserve::Tokens {
                            qos: n.min(u64::from(u32::MAX)) as u32,
                            per_period: tokens.tokens_for_rate(n),
                        },
                        Rate::BestEffort => Reserve::BestEffort,
                    };
                    tokens
                        .add(TaskId(i as u32), r)
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                    Some(Guest {
                        reserve: r,
                        socks: Vec::with_capacity(SOCKETS),
                        pending: std::collections::VecDeque::with_capacity(16),
                        served_ns: None,
                    })
                }
                None => None,
            });
        }
        Ok(Qos {
            tokens,
            epoch: Instant::now(),
            period,
            guests,
            ep: Epoll::new(64)?,
            buf: vec![0u8; 65536],
            tgids: Vec::with_capacity(64),
            me: std::process::id(),
            next_refresh: period.as_nanos() as u64,
            stats: QosStats {
                items: vec![0; rates.len()],
                passed: 0,
            },
        })
    }

    /// The epoll set of the duplicated sockets (the executive watches it).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.ep.as_fd()
    }

    /// The calls a reserved guest's filter must send.
    pub fn wants() -> [u32; 2] {
        [libc::SYS_read as u32, libc::SYS_recvfrom as u32]
    }

    /// Whether guest `g` has a reservation.
    pub fn has(&self, g: usize) -> bool {
        self.guests.get(g).is_some_and(|x| x.is_some())
    }

    /// The next refresh of the tokens, while a read waits (a guest out of
    /// tokens is served then).
    pub fn next_due(&self) -> Option<Instant> {
        if self
            .guests
            .iter()
            .all(|g| g.as_ref().is_none_or(|g| g.pending.is_empty()))
        {
            return None;
        }
        // a busy reserved guest's grace ends before the refresh: decide
        // again then
        let busy_end = self
            .guests
            .iter()
            .flatten()
            .filter_map(|g| g.served_ns)
            .map(|t| t + BUSY.as_nanos() as u64)
            .filter(|&t| t > self.epoch.elapsed().as_nanos() as u64)
            .min();
        let at = busy_end.map_or(self.next_refresh, |b| b.min(self.next_refresh));
        Some(self.epoch + Duration::from_nanos(at))
    }

    /// Takes a read of guest `g` (args as the guest made the call): held
    /// until served; `Err(Pass)` when it is not the reader's.
    pub fn take(
        &mut self,
        g: usize,
        id: u64,
        tid: u32,
        nr: u32,
        a: &[u64; 6],
    ) -> Result<(), NotMine> {
        let Some(guest) = self.guests.get_mut(g).and_then(|x| x.as_mut()) else {
            return Err(NotMine::Pass);
        };
        let (fd, buf, len, flags) = if nr == libc::SYS_read as u32 {
            (a[0] as i32, a[1], a[2] as usize, 0)
        } else {
            // recvfrom(fd, buf, len, flags, addr, addrlen)
            if a[4] != 0 || (a[3] as i32 & !libc::MSG_DONTWAIT) != 0 {
                self.stats.passed += 1;
                return Err(NotMine::Pass);
            }
            (a[0] as i32, a[1], a[2] as usize, a[3] as i32)
        };
        let cached = self.tgids.iter().find(|(t, _)| *t == tid).map(|&(_, p)| p);
        let Some(pid) = cached.or_else(|| {
            let p = crate::perform::status_field(tid, "Tgid:")? as u32;
            if self.tgids.len() == self.tgids.capacity() {
                self.tgids.remove(0);
            }
            self.tgids.push((tid, p));
            Some(p)
        }) else {
            return Err(NotMine::Pass);
        };
        // the cached duplicate, if the guest's fd is still that file
        let me = self.me;
        let k = match guest.socks.iter().position(|s| {
            s.pid == pid
                && s.fd == fd
                && supervise::same_file(pid, fd, me, s.dup.as_raw_fd()).unwrap_or(false)
        }) {
            Some(k) => k,
            None => {
                // a stale entry for this (pid, fd) (the guest closed the
                // socket and reused the number) is replaced where it is:
                // held reads name sockets by their index
                let stale = guest.socks.iter().position(|s| s.pid == pid && s.fd == fd);
                if stale.is_none() && guest.socks.len() == SOCKETS {
                    self.stats.passed += 1;
                    return Err(NotMine::Pass);
                }
                let pidfd = mantle_sys::os::pidfd_open(pid, false).map_err(|_| NotMine::Pass)?;
                let dup =
                    mantle_sys::os::pidfd_getfd(pidfd.as_fd(), fd).map_err(|_| NotMine::Pass)?;
                if !supervise::is_socket(dup.as_fd()).unwrap_or(false) {
                    self.stats.passed += 1;
                    return Err(NotMine::Pass);
                }
                // the token names the guest and the fd number (stable
                // while the socket list changes)
                let token = (g as u64) << 32 | (fd as u32 as u64);
                self.ep
                    .add_oneshot(dup.as_fd(), token)
                    .map_err(|_| NotMine::Pass)?;
                let sock = Sock {
                    pid,
                    fd,
                    dup,
                    token,
                    dry: false,
                };
                match stale {
                    Some(j) => {
                        let _ = self.ep.remove(guest.socks[j].dup.as_fd());
                        guest.socks[j] = sock;
                        j
                    }
                    None => {
                        guest.socks.push(sock);
                        guest.socks.len() - 1
                    }
                }
            }
        };
        guest.pending.push_back(Pending {
            id,
            tid,
            sock: k,
            buf,
            len,
            nonblock: flags & libc::MSG_DONTWAIT != 0,
        });
        Ok(())
    }

    /// Serves what it may (Figure 7), answering through `listener(g)`;
    /// `served(tid)` hears of each read answered for a reserved guest (the
    /// executive runs that guest next: Figure 7's "execute next").
    pub fn serve<'a>(
        &mut self,
        listener: impl Fn(usize) -> Option<&'a Listener>,
        mut served: impl FnMut(u32),
    ) {
        // sockets epoll says have data are no longer dry
        if let Ok(ready) = self.ep.wait(0) {
            for r in ready {
                let g = (r.token >> 32) as usize;
                if let Some(x) = self.guests.get_mut(g).and_then(|x| x.as_mut()) {
                    for s in x.socks.iter_mut().filter(|s| s.token == r.token) {
                        s.dry = false;
                    }
                }
            }
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let p = self.period.as_nanos() as u64;
        self.next_refresh = (now / p + 1) * p;
        loop {
            let guests = &self.guests;
            let has = |t: TaskId| {
                guests
                    .get(t.0 as usize)
                    .and_then(|x| x.as_ref())
                    .and_then(|x| x.pending.front())
                    .is_some_and(|p| {
                        let g = guests[t.0 as usize].as_ref().map(|x| &x.socks);
                        g.and_then(|s| s.get(p.sock)).is_some_and(|s| !s.dry)
                    })
            };
            // a reserved guest busy with its last item, its socket not
            // known empty: it runs (Figure 7), nobody is read for
            let busy = |t: TaskId| {
                guests
                    .get(t.0 as usize)
                    .and_then(|x| x.as_ref())
                    .is_some_and(|x| {
                        matches!(x.reserve, Reserve::Tokens { .. })
                            && x.pending.is_empty()
                            && x.served_ns
                                .is_some_and(|s| now < s + BUSY.as_nanos() as u64)
                            && x.socks.iter().any(|s| !s.dry)
                    })
            };
            let d = self.tokens.pick(now, |t| has(t) || busy(t));
            let Some(t) = d.task else { break };
            if !has(t) {
                // the best-effort guest has nothing (idle), or the chosen
                // reserved guest is busy with its last item
                break;
            }
            let g = t.0 as usize;
            if let Some(tid) = self.read_one(g, listener(g)) {
                if !d.best_effort {
                    served(tid);
                }
            }
        }
        // held reads that asked not to wait and found nothing
        for g in 0..self.guests.len() {
            let Some(guest) = self.guests[g].as_mut() else {
                continue;
            };
            let l = listener(g);
            let mut k = 0;
            while k < guest.pending.len() {
                let p = guest.pending[k];
                if p.nonblock && guest.socks.get(p.sock).is_some_and(|s| s.dry) {
                    guest.pending.remove(k);
                    if let Some(l) = l {
                        let _ = l.reply_error(p.id, libc::EAGAIN);
                    }
                } else {
                    k += 1;
                }
            }
        }
    }

    /// One datagram for guest `g`'s first held read: the caller's tid
    /// when answered with data; None if its socket was dry (marked so) or
    /// the call is gone or failed.
    fn read_one(&mut self, g: usize, listener: Option<&Listener>) -> Option<u32> {
        let guest = self.guests[g].as_mut()?;
        let p = guest.pending.front().copied()?;
        let Some(sock) = guest.socks.get_mut(p.sock) else {
            guest.pending.pop_front();
            return None;
        };
        let n = match supervise::recv_nonblock(sock.dup.as_fd(), &mut self.buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // a read waits on it: tell us when data comes
                sock.dry = true;
                let _ = self.ep.rearm(sock.dup.as_fd(), sock.token);
                return None;
            }
            Err(e) => {
                guest.pending.pop_front();
                if let Some(l) = listener {
                    let _ = l.reply_error(p.id, e.raw_os_error().unwrap_or(libc::EIO));
                }
                return None;
            }
        };
        guest.pending.pop_front();
        let l = listener?;
        let take = n.min(p.len);
        // the caller is still waiting in this call (its tid is still it);
        // if not, the datagram is lost with the call, as a killed reader's
        if !l.id_valid(p.id).unwrap_or(false) {
            return None;
        }
        let r = match supervise::write_memory(p.tid, p.buf, &self.buf[..take]) {
            Ok(w) if w == take => l.reply(p.id, take as i64).map(|()| true),
            _ => l.reply_error(p.id, libc::EFAULT).map(|()| false),
        };
        if r.is_ok() {
            self.stats.items[g] += 1;
            let _ = self.tokens.consume(TaskId(g as u32));
            if let Some(x) = self.guests[g].as_mut() {
                x.served_ns = Some(self.epoch.elapsed().as_nanos() as u64);
            }
        }
        r.ok().filter(|&ok| ok).map(|_| p.tid)
    }

    /// Guest `g` ended: its reads and sockets are forgotten.
    pub fn exit(&mut self, g: usize) {
        if let Some(Some(guest)) = self.guests.get_mut(g) {
            for s in &guest.socks {
                let _ = self.ep.remove(s.dup.as_fd());
            }
            guest.socks.clear();
            guest.pending.clear();
        }
    }

    /// Guest `g`'s reservation.
    pub fn reserve(&self, g: usize) -> Option<Reserve> {
        self.guests
            .get(g)
            .and_then(|x| x.as_ref())
            .map(|x| x.reserve)
    }
}

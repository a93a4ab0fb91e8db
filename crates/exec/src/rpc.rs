//! Calls from a guest to its executive ([`SYS_EXEC`]): a ping, and RPC
//! between two guests through the executive (Hijack's guest → executive
//! RPC and guest ↔ guest RPC, seeds/001 section 3.1).
//!
//! Mechanism: the call reaches the executive as a seccomp notification of
//! the reserved number [`SYS_EXEC`] (always in the filter, answered here
//! before any agent). A notification the executive does not answer holds
//! its caller in the kernel, as [`crate::Decision::Delay`] does: a client's
//! `RPC_CALL` stays unanswered until its server replies, a server's
//! `RPC_RECV` until a request is there. The bytes go guest → executive →
//! guest with process_vm_readv/writev through one buffer of [`RPC_MAX`]
//! bytes; the executive thread never blocks on a guest.
//!
//! Per server guest: a queue of requests not yet received and a list of
//! waiting receivers; in service: requests received and not yet replied
//! to, each with a token (1..=[`RPC_TOKEN_MAX`], never reused while in
//! service) and the server guest that received it (only that guest may
//! reply).
//!
//! Trust: every argument is the guest's claim: lengths are bounded, a
//! short read or write is -EFAULT to the guest whose memory it was,
//! tokens are checked against the replying guest. Before writing into a
//! guest, its notification is re-validated (SECCOMP_IOCTL_NOTIF_ID_VALID)
//! so that the executive writes only into a thread that is still waiting
//! in this call (a tid recycled between the check and the write remains a
//! window of a few instructions, the interface's known limit). A vanished
//! notification (caller killed or interrupted) frees its slot: found when
//! it is answered, and by [`Rpc::sweep`] (every 100 ms).
//!
//! Channels (OP_RPC_CONNECT / OP_RPC_ACCEPT / OP_RPC_CLOSE): here only the
//! broker. A CONNECT allowed by [`may_call`] (the system file's `rpc_to`)
//! is held until its server's ACCEPT; then two memfds (the data, size
//! sealed; the ctl page, sealed F_SEAL_FUTURE_WRITE after the executive
//! mapped it, so only the executive writes it) are installed in both
//! guests with SECCOMP_IOCTL_NOTIF_ADDFD, and the calls go directly between
//! the guests (libmantle's `chan`). The executive ends a channel
//! (`Chan::end`: ctl state, both futex words moved and woken) when a
//! side's process or guest ends, when a side closes it, and when it ends.
//!
//! Not allocation-free: queues grow only up to their bounds
//! ([`MAX_QUEUED`], [`MAX_RECEIVERS`], [`MAX_SERVING`]), preallocated at
//! start-up.

pub use mantle_abi::exec::SYS_EXEC;
use mantle_abi::exec::{
    chan_fds, rpc_recv_result, ChanCtl, ChanHdr, ChanSide, CHAN_CLIENT_OFF, CHAN_CLOSED,
    CHAN_CTL_SIZE, CHAN_DATA_SIZE, CHAN_MAGIC, CHAN_MAX, CHAN_OPEN, CHAN_REVOKED, CHAN_SERVER_OFF,
    CHAN_VERSION, OP_PING, OP_RPC_ACCEPT, OP_RPC_CALL, OP_RPC_CLOSE, OP_RPC_CONNECT, OP_RPC_RECV,
    OP_RPC_REPLY, OP_RPC_REPLY_RECV, RPC_MAX, RPC_TOKEN_MAX,
};
use mantle_sys::seccomp::Listener;
use mantle_sys::shm::{futex_wake_all, SharedMem};
use mantle_sys::supervise;
use std::collections::VecDeque;
use std::mem::offset_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering::SeqCst;

/// Requests queued per server guest before -EAGAIN.
pub const MAX_QUEUED: usize = 256;
/// Threads of one server guest waiting in RECV before -EAGAIN.
pub const MAX_RECEIVERS: usize = 64;
/// Requests in service (received, not replied to) before -EAGAIN.
pub const MAX_SERVING: usize = 1024;

/// Channels open at once (each: two memfds mapped in the executive).
pub const MAX_CHANNELS: usize = 256;
/// Connects waiting for one server guest's accept before -EAGAIN.
pub const MAX_CONNECTING: usize = 64;

/// Who may call whom: `allow[c]` lists the servers guest `c` may call
/// (RPC_CALL, RPC_CONNECT); None: every guest of its system (the default,
/// as before channels existed). Pure: the broker's permission check.
pub fn may_call(allow: &[Option<Vec<usize>>], client: usize, server: usize) -> bool {
    match allow.get(client) {
        Some(Some(list)) => list.contains(&server),
        Some(None) => true,
        None => false,
    }
}

/// A held CONNECT or ACCEPT.
#[derive(Clone, Copy, Debug)]
struct Party {
    guest: usize,
    id: u64,
    tid: u32,
}

/// A channel the executive brokered: its two memfds (the executive's
/// mappings: it writes the ctl page, the guests cannot) and a pidfd of
/// each side's process, so that a side whose process ended revokes the
/// channel even while its guest lives on in other processes.
struct Chan {
    id: u32,
    client: usize,
    server: usize,
    data: SharedMem,
    ctl: SharedMem,
    pidfds: [Option<OwnedFd>; 2],
}

impl Chan {
    /// Tells both sides the channel is over (`state`), and wakes them:
    /// the ctl page first, then each side's futex word changed (so that a
    /// side about to sleep on the value it read does not), then woken.
    /// A side rereads the ctl page after every wake-up and before it
    /// believes a change of its peer's word.
    fn end(&self, state: u32) {
        if let Some(w) = self.ctl.u32(offset_of!(ChanCtl, state)) {
            w.store(state, SeqCst);
        }
        for side in [CHAN_CLIENT_OFF, CHAN_SERVER_OFF] {
            if let Some(w) = self.data.u32(side + offset_of!(ChanSide, seq)) {
                w.fetch_xor(1 << 31, SeqCst);
                futex_wake_all(w);
            }
        }
    }

    /// Whether the process of either side has ended.
    fn a_side_ended(&self) -> bool {
        self.pidfds.iter().flatten().any(|fd| {
            let mut p = [libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            matches!(supervise::poll(&mut p, 0), Ok(n) if n > 0)
        })
    }
}

/// The process (thread group) of thread `tid`, from /proc: read once when
/// a channel is made, with the notification re-validated afterwards.
fn tgid_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The guests as the RPC layer sees them.
pub trait Peers {
    /// How many guests the system has.
    fn count(&self) -> usize;
    /// Guest `g`'s listener while some task still uses its filter.
    fn listener(&self, g: usize) -> Option<&Listener>;
}

/// A request queued for a server.
#[derive(Clone, Copy, Debug)]
struct Req {
    client: usize,
    id: u64,
    tid: u32,
    addr: u64,
    len: usize,
    resp: u64,
    cap: usize,
}

/// A server thread waiting in RECV.
#[derive(Clone, Copy, Debug)]
struct Recv {
    id: u64,
    tid: u32,
    buf: u64,
    cap: usize,
}

/// A request received by `server`, waiting for its reply.
#[derive(Clone, Copy, Debug)]
struct Serving {
    token: u32,
    server: usize,
    req: Req,
}

/// Counters for the status and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RpcStats {
    pub pings: u64,
    pub calls: u64,
    pub replies: u64,
    /// Channels made, and ended (closed by a side or revoked).
    pub channels: u64,
    pub channels_ended: u64,
    /// Calls refused (bad argument, no server, full queue...).
    pub refused: u64,
    /// Notifications found gone (caller killed or interrupted).
    pub vanished: u64,
}

/// The executive's RPC state.
pub struct Rpc {
    queued: Vec<VecDeque<Req>>,
    receivers: Vec<Vec<Recv>>,
    serving: Vec<Serving>,
    next_token: u32,
    buf: Vec<u8>,
    pid: u32,
    allow: Vec<Option<Vec<usize>>>,
    connecting: Vec<VecDeque<Party>>,
    accepting: Vec<Vec<Party>>,
    chans: Vec<Chan>,
    next_chan: u32,
    pub stats: RpcStats,
}

/// Why an op is refused: the errno its caller gets.
type Errno = i32;

fn answer(l: &Listener, id: u64, r: Result<i64, Errno>) -> bool {
    match r {
        Ok(v) => l.reply(id, v).is_ok(),
        Err(e) => l.reply_error(id, e).is_ok(),
    }
}

fn pending(l: &Listener, id: u64) -> bool {
    l.id_valid(id).unwrap_or(false)
}

/// Reads exactly `buf.len()` bytes of `tid` at `addr`.
fn read_exact(tid: u32, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    match supervise::read_memory(tid, addr, buf) {
        Ok(n) if n == buf.len() => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// Writes all of `buf` into `tid` at `addr`.
fn write_all(tid: u32, addr: u64, buf: &[u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    match supervise::write_memory(tid, addr, buf) {
        Ok(n) if n == buf.len() => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// A length argument: at most [`RPC_MAX`].
fn len_arg(v: u64) -> Result<usize, Errno> {
    if v > RPC_MAX as u64 {
        Err(libc::EMSGSIZE)
    } else {
        Ok(v as usize)
    }
}

impl Rpc {
    /// State for `guests` guests; `pid` is what a ping answers.
    pub fn new(guests: usize, pid: u32) -> Rpc {
        Rpc {
            queued: (0..guests)
                .map(|_| VecDeque::with_capacity(MAX_QUEUED))
                .collect(),
            receivers: (0..guests)
                .map(|_| Vec::with_capacity(MAX_RECEIVERS))
                .collect(),
            serving: Vec::with_capacity(MAX_SERVING),
            next_token: 1,
            buf: vec![0u8; RPC_MAX],
            pid,
            allow: vec![None; guests],
            connecting: (0..guests)
                .map(|_| VecDeque::with_capacity(MAX_CONNECTING))
                .collect(),
            accepting: (0..guests)
                .map(|_| Vec::with_capacity(MAX_RECEIVERS))
                .collect(),
            chans: Vec::with_capacity(MAX_CHANNELS),
            next_chan: 1,
            stats: RpcStats::default(),
        }
    }

    /// Who may call whom ([`may_call`]); one entry per guest.
    pub fn set_allowed(&mut self, allow: Vec<Option<Vec<usize>>>) {
        if allow.len() == self.allow.len() {
            self.allow = allow;
        }
    }

    /// Channels open now.
    pub fn channels(&self) -> usize {
        self.chans.len()
    }

    /// Calls held (unanswered) for guest `g`: its queued requests, its
    /// waiting receivers, its clients' requests in service.
    pub fn held_by(&self, g: usize) -> u64 {
        let q = self
            .queued
            .iter()
            .flatten()
            .filter(|r| r.client == g)
            .count();
        let r = self.receivers.get(g).map_or(0, |v| v.len());
        let s = self.serving.iter().filter(|s| s.req.client == g).count();
        let c = self
            .connecting
            .iter()
            .flatten()
            .filter(|c| c.guest == g)
            .count();
        let a = self.accepting.get(g).map_or(0, |v| v.len());
        (q + r + s + c + a) as u64
    }

    /// One [`SYS_EXEC`] notification `id` of guest `g`'s thread `tid`.
    pub fn handle(&mut self, p: &dyn Peers, g: usize, id: u64, tid: u32, args: [u64; 6]) {
        let Some(l) = p.listener(g) else { return };
        let r = match args[0] {
            OP_PING => {
                self.stats.pings += 1;
                Ok(i64::from(self.pid))
            }
            OP_RPC_CALL => match self.call(p, g, id, tid, &args) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            OP_RPC_RECV => match self.recv(p, g, id, tid, &args) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            OP_RPC_REPLY => self.reply(p, g, tid, &args).map(|()| 0),
            OP_RPC_REPLY_RECV => {
                let replied = if args[1] == 0 {
                    Ok(())
                } else {
                    match self.reply(p, g, tid, &[0, args[1], args[2], args[3], 0, 0]) {
                        Err(libc::ESRCH) => Ok(()),
                        r => r,
                    }
                };
                match replied
                    .and_then(|()| self.recv(p, g, id, tid, &[0, args[4], args[5], 0, 0, 0]))
                {
                    Ok(()) => return,
                    Err(e) => Err(e),
                }
            }
            OP_RPC_CONNECT => match self.connect(p, g, id, tid, args[1]) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            OP_RPC_ACCEPT => {
                if self.accepting[g].len() >= MAX_RECEIVERS {
                    Err(libc::EAGAIN)
                } else {
                    self.accepting[g].push(Party { guest: g, id, tid });
                    self.pair(p, g);
                    return;
                }
            }
            OP_RPC_CLOSE => self.close(g, args[1]).map(|()| 0),
            _ => Err(libc::EINVAL),
        };
        if r.is_err() {
            self.stats.refused += 1;
        }
        if !answer(l, id, r) {
            self.stats.vanished += 1;
        }
    }

    fn call(
        &mut self,
        p: &dyn Peers,
        g: usize,
        id: u64,
        tid: u32,
        a: &[u64; 6],
    ) -> Result<(), Errno> {
        let server = usize::try_from(a[1]).map_err(|_| libc::ESRCH)?;
        // permission first: a guest that may not call learns nothing more
        if !may_call(&self.allow, g, server) {
            return Err(libc::EACCES);
        }
        if server >= p.count() || p.listener(server).is_none() {
            return Err(libc::ESRCH);
        }
        let len = len_arg(a[3])?;
        // a larger capacity is only room the reply will not use
        let cap = a[5].min(RPC_MAX as u64) as usize;
        if self.queued[server].len() >= MAX_QUEUED {
            return Err(libc::EAGAIN);
        }
        self.stats.calls += 1;
        self.queued[server].push_back(Req {
            client: g,
            id,
            tid,
            addr: a[2],
            len,
            resp: a[4],
            cap,
        });
        self.deliver(p, server);
        Ok(())
    }

    fn recv(
        &mut self,
        p: &dyn Peers,
        g: usize,
        id: u64,
        tid: u32,
        a: &[u64; 6],
    ) -> Result<(), Errno> {
        let cap = a[2].min(RPC_MAX as u64) as usize;
        if self.receivers[g].len() >= MAX_RECEIVERS {
            return Err(libc::EAGAIN);
        }
        self.receivers[g].push(Recv {
            id,
            tid,
            buf: a[1],
            cap,
        });
        self.deliver(p, g);
        Ok(())
    }

    /// Hands server `s`'s queued requests to its waiting receivers.
    fn deliver(&mut self, p: &dyn Peers, s: usize) {
        let Some(sl) = p.listener(s) else { return };
        while !self.queued[s].is_empty() && !self.receivers[s].is_empty() {
            if self.serving.len() >= MAX_SERVING {
                return; // held until replies free room
            }
            let Some(req) = self.queued[s].pop_front() else {
                return;
            };
            let Some(cl) = p.listener(req.client) else {
                self.stats.vanished += 1;
                continue;
            };
            let rv = self.receivers[s][0];
            if req.len > rv.cap {
                // the client learns its request is too large for the server
                self.stats.refused += 1;
                if !answer(cl, req.id, Err(libc::EMSGSIZE)) {
                    self.stats.vanished += 1;
                }
                continue;
            }
            let n = req.len;
            if let Err(e) = read_exact(req.tid, req.addr, &mut self.buf[..n]) {
                if pending(cl, req.id) {
                    self.stats.refused += 1;
                    if !answer(cl, req.id, Err(e)) {
                        self.stats.vanished += 1;
                    }
                } else {
                    self.stats.vanished += 1;
                }
                continue;
            }
            // the bytes are the caller's only if it is still in this call
            if !pending(cl, req.id) {
                self.stats.vanished += 1;
                continue;
            }
            self.receivers[s].remove(0);
            if !pending(sl, rv.id) {
                self.stats.vanished += 1;
                self.queued[s].push_front(req);
                continue;
            }
            if let Err(e) = write_all(rv.tid, rv.buf, &self.buf[..n]) {
                self.stats.refused += 1;
                if !answer(sl, rv.id, Err(e)) {
                    self.stats.vanished += 1;
                }
                self.queued[s].push_front(req);
                continue;
            }
            let token = self.token();
            if answer(sl, rv.id, Ok(rpc_recv_result(token, n))) {
                self.serving.push(Serving {
                    token,
                    server: s,
                    req,
                });
            } else {
                // the receiver went away: the next one gets the request
                self.stats.vanished += 1;
                self.queued[s].push_front(req);
            }
        }
    }

    /// CONNECT from guest `g` to guest `server`: checked, then held until
    /// the server accepts.
    fn connect(
        &mut self,
        p: &dyn Peers,
        g: usize,
        id: u64,
        tid: u32,
        server: u64,
    ) -> Result<(), Errno> {
        let server = usize::try_from(server).map_err(|_| libc::ESRCH)?;
        if !may_call(&self.allow, g, server) {
            return Err(libc::EACCES);
        }
        if server >= p.count() || p.listener(server).is_none() {
            return Err(libc::ESRCH);
        }
        if self.connecting[server].len() >= MAX_CONNECTING {
            return Err(libc::EAGAIN);
        }
        self.connecting[server].push_back(Party { guest: g, id, tid });
        self.pair(p, server);
        Ok(())
    }

    /// Makes channels between server `s`'s held ACCEPTs and the CONNECTs
    /// to it, in arrival order.
    fn pair(&mut self, p: &dyn Peers, s: usize) {
        while !self.connecting[s].is_empty() && !self.accepting[s].is_empty() {
            let Some(sl) = p.listener(s) else { return };
            let acc = self.accepting[s][0];
            if !pending(sl, acc.id) {
                self.accepting[s].remove(0);
                self.stats.vanished += 1;
                continue;
            }
            let Some(con) = self.connecting[s].pop_front() else {
                return;
            };
            let Some(cl) = p.listener(con.guest).filter(|l| pending(l, con.id)) else {
                self.stats.vanished += 1;
                continue;
            };
            if self.chans.len() >= MAX_CHANNELS {
                self.stats.refused += 1;
                if !answer(cl, con.id, Err(libc::EMFILE)) {
                    self.stats.vanished += 1;
                }
                continue;
            }
            let chan = match self.make_chan(&con, &acc, s) {
                Ok(c) => c,
                Err(e) => {
                    self.stats.refused += 1;
                    if !answer(cl, con.id, Err(e)) {
                        self.stats.vanished += 1;
                    }
                    continue;
                }
            };
            // the server first: if its thread is gone, the client waits
            // for the next acceptor (fds already installed in a process
            // whose accepting thread vanished stay there, close-on-exec,
            // until it closes them or ends)
            let Ok(sv) = install(sl, acc.id, &chan) else {
                self.accepting[s].remove(0);
                self.stats.vanished += 1;
                self.connecting[s].push_front(con);
                continue;
            };
            self.accepting[s].remove(0);
            match install(cl, con.id, &chan) {
                Ok(cv) => {
                    let _ = answer(cl, con.id, Ok(cv));
                }
                Err(()) => {
                    // the client vanished: the server gets an ended channel
                    self.stats.vanished += 1;
                    chan.end(CHAN_REVOKED);
                }
            }
            if !answer(sl, acc.id, Ok(sv)) {
                self.stats.vanished += 1;
            }
            self.stats.channels += 1;
            self.chans.push(chan);
        }
    }

    /// A new channel between `con` (client) and `acc` (server guest `s`).
    fn make_chan(&mut self, con: &Party, acc: &Party, s: usize) -> Result<Chan, Errno> {
        let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::ENOMEM);
        let data = SharedMem::create(c"mantle-chan", CHAN_DATA_SIZE).map_err(errno)?;
        data.seal_size().map_err(errno)?;
        let ctl = SharedMem::create(c"mantle-chan-ctl", CHAN_CTL_SIZE).map_err(errno)?;
        let id = self.next_chan;
        self.next_chan = self.next_chan.wrapping_add(1).max(1);
        let hdr = ChanHdr {
            magic: CHAN_MAGIC,
            version: CHAN_VERSION,
            size: CHAN_DATA_SIZE as u32,
            max: CHAN_MAX as u32,
            reserved: [0; 12],
        };
        let c = ChanCtl {
            magic: CHAN_MAGIC,
            version: CHAN_VERSION,
            state: CHAN_OPEN,
            id,
            client: con.guest as u32,
            server: s as u32,
            reserved: [0; 10],
        };
        use mantle_abi::IntoBytes;
        data.copy_in(0, hdr.as_bytes());
        // no side has run yet: "another CPU" until each says where it runs
        for side in [CHAN_CLIENT_OFF, CHAN_SERVER_OFF] {
            if let Some(w) = data.u32(side + offset_of!(ChanSide, cpu)) {
                w.store(u32::MAX, SeqCst);
            }
        }
        ctl.copy_in(0, c.as_bytes());
        ctl.seal_read_only_for_others().map_err(errno)?;
        // each side's process, to revoke the channel when it ends; a
        // thread that cannot be looked up (gone already) leaves None and
        // its notification's re-validation catches it
        let pidfd = |tid: u32| tgid_of(tid).and_then(|t| mantle_sys::os::pidfd_open(t, false).ok());
        Ok(Chan {
            id,
            client: con.guest,
            server: s,
            pidfds: [pidfd(con.tid), pidfd(acc.tid)],
            data,
            ctl,
        })
    }

    /// OP_RPC_CLOSE of channel `id` by guest `g` (one of its two guests).
    fn close(&mut self, g: usize, id: u64) -> Result<(), Errno> {
        let k = self
            .chans
            .iter()
            .position(|c| u64::from(c.id) == id && (c.client == g || c.server == g))
            .ok_or(libc::ENOENT)?;
        let c = self.chans.swap_remove(k);
        c.end(CHAN_CLOSED);
        self.stats.channels_ended += 1;
        Ok(())
    }

    /// Revokes every channel of guest `g` (the executive's decision: the
    /// guests learn it from the ctl page they cannot write).
    pub fn revoke_guest(&mut self, g: usize) {
        let before = self.chans.len();
        self.chans.retain(|c| {
            let hit = c.client == g || c.server == g;
            if hit {
                c.end(CHAN_REVOKED);
            }
            !hit
        });
        self.stats.channels_ended += (before - self.chans.len()) as u64;
    }

    fn token(&mut self) -> u32 {
        loop {
            let t = self.next_token;
            self.next_token = if t >= RPC_TOKEN_MAX { 1 } else { t + 1 };
            if !self.serving.iter().any(|s| s.token == t) {
                return t;
            }
        }
    }

    fn reply(&mut self, p: &dyn Peers, g: usize, tid: u32, a: &[u64; 6]) -> Result<(), Errno> {
        let token = u32::try_from(a[1]).map_err(|_| libc::ENOENT)?;
        let k = self
            .serving
            .iter()
            .position(|s| s.token == token && s.server == g)
            .ok_or(libc::ENOENT)?;
        let len = len_arg(a[3])?;
        let req = self.serving[k].req;
        if len > req.cap {
            return Err(libc::EMSGSIZE); // still in service: reply shorter
        }
        read_exact(tid, a[2], &mut self.buf[..len])?;
        let was_full = self.serving.len() >= MAX_SERVING;
        self.serving.swap_remove(k);
        self.stats.replies += 1;
        let r = self.answer_client(p, &req, len);
        if was_full {
            // the reply made room: deliver what waited for it
            for s in 0..self.queued.len() {
                self.deliver(p, s);
            }
        }
        r
    }

    /// Writes the reply (in the buffer, `len` bytes) into `req`'s client
    /// and answers it; -ESRCH (to the server) if the client is gone.
    fn answer_client(&mut self, p: &dyn Peers, req: &Req, len: usize) -> Result<(), Errno> {
        let Some(cl) = p.listener(req.client) else {
            return Err(libc::ESRCH);
        };
        if !pending(cl, req.id) {
            self.stats.vanished += 1;
            return Err(libc::ESRCH);
        }
        let r = write_all(req.tid, req.resp, &self.buf[..len]).map(|()| len as i64);
        if !answer(cl, req.id, r) {
            self.stats.vanished += 1;
            return Err(libc::ESRCH);
        }
        Ok(())
    }

    /// Drops the held calls whose notifications vanished; answers
    /// -ECONNRESET to the clients of servers whose guest is gone.
    pub fn sweep(&mut self, p: &dyn Peers) {
        for s in 0..self.queued.len() {
            let server_gone = p.listener(s).is_none();
            let mut q = std::mem::take(&mut self.queued[s]);
            q.retain(|r| self.keep_held(p, r, server_gone));
            self.queued[s] = q;
            match p.listener(s) {
                Some(sl) => {
                    let before = self.receivers[s].len();
                    self.receivers[s].retain(|r| pending(sl, r.id));
                    self.stats.vanished += (before - self.receivers[s].len()) as u64;
                }
                None => self.receivers[s].clear(),
            }
        }
        let mut sv = std::mem::take(&mut self.serving);
        sv.retain(|s| self.keep_held(p, &s.req, p.listener(s.server).is_none()));
        self.serving = sv;
        self.sweep_channels(p);
    }

    /// Revokes the channels one of whose guests, or processes, ended;
    /// drops held CONNECTs/ACCEPTs that vanished, and answers -ECONNRESET
    /// to the CONNECTs of a server guest that ended.
    fn sweep_channels(&mut self, p: &dyn Peers) {
        let before = self.chans.len();
        self.chans.retain(|c| {
            let gone = p.listener(c.client).is_none()
                || p.listener(c.server).is_none()
                || c.a_side_ended();
            if gone {
                c.end(CHAN_REVOKED);
            }
            !gone
        });
        self.stats.channels_ended += (before - self.chans.len()) as u64;
        for s in 0..self.connecting.len() {
            let server_gone = p.listener(s).is_none();
            let mut q = std::mem::take(&mut self.connecting[s]);
            q.retain(|c| match p.listener(c.guest) {
                None => false,
                Some(l) if server_gone => {
                    let _ = answer(l, c.id, Err(libc::ECONNRESET));
                    false
                }
                Some(l) => pending(l, c.id),
            });
            self.connecting[s] = q;
            match p.listener(s) {
                Some(l) => self.accepting[s].retain(|a| pending(l, a.id)),
                None => self.accepting[s].clear(),
            }
        }
    }

    fn keep_held(&mut self, p: &dyn Peers, r: &Req, server_gone: bool) -> bool {
        let Some(cl) = p.listener(r.client) else {
            return false;
        };
        if server_gone {
            if !answer(cl, r.id, Err(libc::ECONNRESET)) {
                self.stats.vanished += 1;
            }
            return false;
        }
        if pending(cl, r.id) {
            true
        } else {
            self.stats.vanished += 1;
            false
        }
    }

    /// Answers every held call with -ECONNRESET (the executive is ending)
    /// and revokes every channel.
    pub fn drain(&mut self, p: &dyn Peers) {
        for c in self.chans.drain(..) {
            c.end(CHAN_REVOKED);
            self.stats.channels_ended += 1;
        }
        for (s, q) in self.connecting.iter_mut().enumerate() {
            for c in q.drain(..) {
                if let Some(l) = p.listener(c.guest) {
                    let _ = answer(l, c.id, Err(libc::ECONNRESET));
                }
            }
            if let Some(l) = p.listener(s) {
                for a in self.accepting[s].drain(..) {
                    let _ = answer(l, a.id, Err(libc::ECONNRESET));
                }
            }
        }
        let queued: Vec<Req> = self.queued.iter_mut().flat_map(|q| q.drain(..)).collect();
        let serving: Vec<Req> = self.serving.drain(..).map(|s| s.req).collect();
        for r in queued.iter().chain(serving.iter()) {
            if let Some(l) = p.listener(r.client) {
                let _ = answer(l, r.id, Err(libc::ECONNRESET));
            }
        }
        for (s, rs) in self.receivers.iter_mut().enumerate() {
            if let Some(l) = p.listener(s) {
                for r in rs.drain(..) {
                    let _ = answer(l, r.id, Err(libc::ECONNRESET));
                }
            }
        }
    }
}

/// Installs a channel's two fds in the target of notification `id`
/// (close-on-exec); the CONNECT/ACCEPT result that names them.
fn install(l: &Listener, id: u64, c: &Chan) -> Result<i64, ()> {
    let flags = libc::O_CLOEXEC as u32;
    let d = l
        .addfd(id, c.data.fd().as_fd(), 0, 0, flags)
        .map_err(|_| ())?;
    let k = l
        .addfd(id, c.ctl.fd().as_fd(), 0, 0, flags)
        .map_err(|_| ())?;
    Ok(chan_fds(d, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_lets_a_guest_call_only_the_servers_it_was_given() {
        // guest 0 may call anyone, guest 1 only guest 2, guest 2 nobody
        let allow = vec![None, Some(vec![2]), Some(vec![])];
        assert!(may_call(&allow, 0, 1) && may_call(&allow, 0, 2) && may_call(&allow, 0, 0));
        assert!(may_call(&allow, 1, 2));
        assert!(!may_call(&allow, 1, 0) && !may_call(&allow, 1, 1));
        assert!(!may_call(&allow, 2, 0) && !may_call(&allow, 2, 1));
        // a guest the table does not know may call nobody
        assert!(!may_call(&allow, 3, 0) && !may_call(&allow, usize::MAX, 0));
    }

    #[test]
    fn an_ended_channel_says_so_on_the_page_guests_cannot_write_and_moves_both_words() {
        let data = SharedMem::create(c"t", CHAN_DATA_SIZE).unwrap();
        let ctl = SharedMem::create(c"t", CHAN_CTL_SIZE).unwrap();
        ctl.u32(offset_of!(ChanCtl, state))
            .unwrap()
            .store(CHAN_OPEN, SeqCst);
        let c = Chan {
            id: 1,
            client: 0,
            server: 1,
            data,
            ctl,
            pidfds: [None, None],
        };
        let w = |off| {
            c.data
                .u32(off + offset_of!(ChanSide, seq))
                .unwrap()
                .load(SeqCst)
        };
        let (a, b) = (w(CHAN_CLIENT_OFF), w(CHAN_SERVER_OFF));
        c.end(CHAN_REVOKED);
        assert_eq!(c.ctl.u32(8).unwrap().load(SeqCst), CHAN_REVOKED);
        assert_ne!(w(CHAN_CLIENT_OFF), a);
        assert_ne!(w(CHAN_SERVER_OFF), b);
        assert!(!c.a_side_ended());
    }

    #[test]
    fn lengths_are_bounded() {
        assert_eq!(len_arg(0), Ok(0));
        assert_eq!(len_arg(RPC_MAX as u64), Ok(RPC_MAX));
        assert_eq!(len_arg(RPC_MAX as u64 + 1), Err(libc::EMSGSIZE));
        assert_eq!(len_arg(u64::MAX), Err(libc::EMSGSIZE));
    }

    #[test]
    fn tokens_skip_those_in_service_and_wrap() {
        let mut r = Rpc::new(1, 1);
        r.next_token = RPC_TOKEN_MAX;
        assert_eq!(r.token(), RPC_TOKEN_MAX);
        r.serving.push(Serving {
            token: 1,
            server: 0,
            req: Req {
                client: 0,
                id: 0,
                tid: 0,
                addr: 0,
                len: 0,
                resp: 0,
                cap: 0,
            },
        });
        assert_eq!(r.token(), 2);
    }

    #[test]
    fn bad_memory_is_efault() {
        let mut b = [0u8; 4];
        assert_eq!(read_exact(std::process::id(), 8, &mut b), Err(libc::EFAULT));
        assert_eq!(write_all(std::process::id(), 8, &b), Err(libc::EFAULT));
        assert_eq!(read_exact(std::process::id(), 8, &mut []), Ok(()));
    }
}

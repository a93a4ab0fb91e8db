//! Guest ↔ guest RPC channels: the executive brokers, the calls go
//! directly between the two guests through shared memory. C:
//! `include/mantle/exec.h` (`mantle_chan_*`); layout and protocol:
//! mantle_abi::exec (`ChanSide`, `ChanCtl`) and docs/exec.md "RPC channels".
//!
//! Mechanism: [`Channel::connect`] (client) and [`Channel::accept`]
//! (server) are one trap each to the executive, which checks that the
//! client may call that server and installs two memfds in both guests: the
//! data (read-write in both) and the ctl page (written only by the
//! executive). A call is then: the client copies its request into the data,
//! publishes its sequence number and wakes the server only if the server
//! sleeps; it waits for the server's number a bounded time first, by
//! spinning when the server last ran on another CPU (a cross-CPU wake-up
//! costs tens of µs in a VM whose idle CPUs halt; a shared cache line a
//! fraction of one), by yielding the CPU to it when on the same CPU, then
//! with FUTEX_WAIT. No trap to the executive per call.
//!
//! Trust: the peer may write anything into the data at any time. Each of
//! its fields is read once into local variables and bounded before use
//! (lengths ≤ CHAN_MAX and the room asked for, a status must be an errno);
//! bytes are copied out through atomic loads into the caller's buffer, so
//! a racing peer makes garbage bytes, never an access outside the mapping.
//! The ctl page is the one thing believed: it is reread after every wake-up
//! and before a change of the peer's word is taken as an answer, so that a
//! channel the executive revoked (a side's process ended, the executive
//! ends) or a side closed fails at once with ECONNRESET or EPIPE. A peer
//! alive but silent is bounded by the caller's timeout (ETIMEDOUT).
//!
//! Invariants: one call at a time per channel (a mutex in this process's
//! own memory, never in the shared pages); a client whose call timed out
//! waits, at its next call, for that late reply before writing a new
//! request, so that the server never reads a request being overwritten.

use crate::exec::ExecError;
use mantle_abi::exec::{
    chan_fds_split, ChanCtl, ChanSide, CHAN_CLIENT_OFF, CHAN_CLOSED, CHAN_CTL_SIZE, CHAN_DATA_SIZE,
    CHAN_MAGIC, CHAN_MAX, CHAN_OPEN, CHAN_REQ_OFF, CHAN_RESP_OFF, CHAN_SERVER_OFF, CHAN_VERSION,
    OP_RPC_ACCEPT, OP_RPC_CLOSE, OP_RPC_CONNECT, SYS_EXEC,
};
use mantle_sys::shm::{current_cpu, futex_wait, futex_wake, SharedMem};
use mantle_sys::supervise::exec_trap;
use std::mem::offset_of;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a side spins (peer on another CPU) or yields to its peer (same
/// CPU) before it sleeps: about one cross-CPU wake-up on the VMs mantle is
/// measured on (33–70 µs), so that waiting awake never costs more than
/// twice what sleeping would have.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Sequence numbers stay below bit 31 (the executive flips that bit when
/// it ends a channel, to move a sleeper's word).
const SEQ_MASK: u32 = 0x7fff_ffff;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Client,
    Server,
}

#[derive(Debug)]
struct State {
    /// Client: the last request's number; server: the last received.
    seq: u32,
    /// Client: a call timed out and its reply has not been seen.
    late: bool,
    /// Server: a received request not yet answered, and its client's room.
    in_service: bool,
    room: usize,
    spin: Duration,
}

/// One end of a channel.
pub struct Channel {
    data: SharedMem,
    ctl: SharedMem,
    id: u32,
    role: Role,
    st: Mutex<State>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.id)
            .field("role", &self.role)
            .finish()
    }
}

fn errno(e: i32) -> ExecError {
    ExecError::Errno(e)
}

/// A deadline `timeout` from now (None: no limit).
fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

impl Channel {
    /// Connects to server guest `server` (its index in the system): held
    /// until the server accepts. EACCES: this guest may not call it;
    /// ESRCH: no such guest; NotAGuest: not under an executive.
    pub fn connect(server: u32) -> Result<Channel, ExecError> {
        let r = exec_trap(SYS_EXEC, OP_RPC_CONNECT, [u64::from(server), 0, 0, 0, 0]);
        Channel::open(r, Role::Client)
    }

    /// Waits for a client to connect to this guest.
    pub fn accept() -> Result<Channel, ExecError> {
        let r = exec_trap(SYS_EXEC, OP_RPC_ACCEPT, [0; 5]);
        Channel::open(r, Role::Server)
    }

    fn open(r: i64, role: Role) -> Result<Channel, ExecError> {
        if r == -i64::from(libc::ENOSYS) {
            return Err(ExecError::NotAGuest);
        }
        if r < 0 {
            return Err(errno((-r) as i32));
        }
        let (d, c) = chan_fds_split(r);
        if d < 0 || c < 0 || d == c {
            return Err(errno(libc::EPROTO));
        }
        // SAFETY: the executive installed both fds in this process for
        // this call and answered their numbers: nothing else owns them.
        let (d, c) = unsafe { (OwnedFd::from_raw_fd(d), OwnedFd::from_raw_fd(c)) };
        let io = |e: std::io::Error| errno(e.raw_os_error().unwrap_or(libc::EPROTO));
        let data = SharedMem::map(d, CHAN_DATA_SIZE).map_err(io)?;
        let ctl = SharedMem::map_readonly(c, CHAN_CTL_SIZE).map_err(io)?;
        let word = |off| ctl.u32(off).map_or(0, |w| w.load(SeqCst));
        if word(offset_of!(ChanCtl, magic)) != CHAN_MAGIC
            || word(offset_of!(ChanCtl, version)) != CHAN_VERSION
        {
            return Err(errno(libc::EPROTO));
        }
        let id = word(offset_of!(ChanCtl, id));
        Ok(Channel {
            data,
            ctl,
            id,
            role,
            st: Mutex::new(State {
                seq: 0,
                late: false,
                in_service: false,
                room: 0,
                spin: DEFAULT_SPIN,
            }),
        })
    }

    /// The channel's number in its executive.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// How long to spin for (or yield to) the peer before sleeping (0:
    /// sleep at once).
    pub fn set_spin(&self, spin: Duration) {
        self.lock().spin = spin;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn side(&self, off: usize, field: usize) -> &AtomicU32 {
        // the offsets are constants inside the mapping, checked in tests
        self.data
            .u32(off + field)
            .expect("channel layout inside the mapping")
    }

    fn mine(&self) -> usize {
        match self.role {
            Role::Client => CHAN_CLIENT_OFF,
            Role::Server => CHAN_SERVER_OFF,
        }
    }

    fn peer(&self) -> usize {
        match self.role {
            Role::Client => CHAN_SERVER_OFF,
            Role::Server => CHAN_CLIENT_OFF,
        }
    }

    /// The ctl page's verdict: Ok while open.
    fn open_now(&self) -> Result<(), ExecError> {
        match self
            .ctl
            .u32(offset_of!(ChanCtl, state))
            .map(|w| w.load(SeqCst))
        {
            Some(CHAN_OPEN) => Ok(()),
            Some(CHAN_CLOSED) => Err(errno(libc::EPIPE)),
            _ => Err(errno(libc::ECONNRESET)),
        }
    }

    /// Publishes our word `seq` and wakes the peer if it sleeps on it.
    fn publish(&self, seq: u32) {
        let w = self.side(self.mine(), offset_of!(ChanSide, seq));
        w.store(seq, SeqCst);
        if self
            .side(self.peer(), offset_of!(ChanSide, waiting))
            .load(SeqCst)
            != 0
        {
            futex_wake(w);
        }
    }

    /// Waits until the peer's word satisfies `done`: spins (peer on
    /// another CPU), then sleeps; the ctl page is checked before a value is
    /// believed. ETIMEDOUT at `until`.
    fn wait(
        &self,
        spin: Duration,
        until: Option<Instant>,
        done: impl Fn(u32) -> bool,
    ) -> Result<u32, ExecError> {
        let word = self.side(self.peer(), offset_of!(ChanSide, seq));
        let cpu = current_cpu().unwrap_or(u32::MAX);
        self.side(self.mine(), offset_of!(ChanSide, cpu))
            .store(cpu, Relaxed);
        let peer_cpu = self
            .side(self.peer(), offset_of!(ChanSide, cpu))
            .load(Relaxed);
        // Same CPU: the peer cannot run while we spin, so we yield to it
        // instead (sched_yield): when it was just woken or is spinning
        // too, it runs at once, answers without a FUTEX_WAKE (we are not
        // asleep) and yields back: one system call per side per call
        // instead of the FUTEX_WAKE + FUTEX_WAIT (or a pipe's write + read).
        let same = peer_cpu == cpu;
        if !spin.is_zero() {
            let t0 = Instant::now();
            let mut i = 0u32;
            loop {
                let v = word.load(SeqCst);
                if done(v) {
                    self.open_now()?;
                    return Ok(v);
                }
                i = i.wrapping_add(1);
                if same || i.is_multiple_of(64) {
                    self.open_now()?;
                    if t0.elapsed() >= spin || until.is_some_and(|u| Instant::now() >= u) {
                        break;
                    }
                }
                if same {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        let waiting = self.side(self.mine(), offset_of!(ChanSide, waiting));
        loop {
            waiting.store(1, SeqCst);
            let v = word.load(SeqCst);
            if let Err(e) = self.open_now() {
                waiting.store(0, SeqCst);
                return Err(e);
            }
            if done(v) {
                waiting.store(0, SeqCst);
                return Ok(v);
            }
            let left = match until {
                None => Duration::from_secs(3600),
                Some(u) => {
                    let now = Instant::now();
                    if now >= u {
                        waiting.store(0, SeqCst);
                        return Err(errno(libc::ETIMEDOUT));
                    }
                    u - now
                }
            };
            futex_wait(word, v, left);
        }
    }

    /// Client: sends `req`, waits for the reply (into `resp`), returns its
    /// length. `timeout` None: no limit (a revoked channel still ends the
    /// wait). EMSGSIZE: `req` longer than CHAN_MAX, or than the server's
    /// room; EPROTO: the server's answer broke the protocol (a length
    /// beyond `resp`, a status that is no errno); ETIMEDOUT; ECONNRESET /
    /// EPIPE: revoked / closed.
    pub fn call(
        &self,
        req: &[u8],
        resp: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<usize, ExecError> {
        if self.role != Role::Client {
            return Err(errno(libc::EINVAL));
        }
        if req.len() > CHAN_MAX {
            return Err(errno(libc::EMSGSIZE));
        }
        let until = deadline(timeout);
        let mut st = self.lock();
        self.open_now()?;
        if st.late {
            // the server may still read the last request: wait for its answer
            let want = st.seq;
            self.wait(st.spin, until, |v| v == want)?;
            st.late = false;
        }
        let room = resp.len().min(CHAN_MAX);
        let c = (st.seq.wrapping_add(1) & SEQ_MASK).max(1);
        self.data.copy_in(CHAN_REQ_OFF, req);
        let me = self.mine();
        self.side(me, offset_of!(ChanSide, len))
            .store(req.len() as u32, Relaxed);
        self.side(me, offset_of!(ChanSide, arg))
            .store(room as u32, Relaxed);
        st.seq = c;
        self.publish(c);
        match self.wait(st.spin, until, |v| v == c) {
            Ok(_) => {}
            Err(e) => {
                st.late = e == errno(libc::ETIMEDOUT);
                return Err(e);
            }
        }
        // the server's fields, each read once
        let p = self.peer();
        let status = self.side(p, offset_of!(ChanSide, arg)).load(Relaxed);
        let len = self.side(p, offset_of!(ChanSide, len)).load(Relaxed) as usize;
        if status != 0 {
            return Err(errno(if status < 4096 {
                status as i32
            } else {
                libc::EPROTO
            }));
        }
        if len > room {
            return Err(errno(libc::EPROTO));
        }
        self.data.copy_out(CHAN_RESP_OFF, &mut resp[..len]);
        Ok(len)
    }

    /// Server: waits for the next request (into `buf`); its length. A
    /// request longer than `buf` (or CHAN_MAX) is answered EMSGSIZE for
    /// the client and the wait goes on. EALREADY: the last request was not
    /// answered yet.
    pub fn receive(&self, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize, ExecError> {
        if self.role != Role::Server {
            return Err(errno(libc::EINVAL));
        }
        let until = deadline(timeout);
        let mut st = self.lock();
        if st.in_service {
            return Err(errno(libc::EALREADY));
        }
        let room = buf.len().min(CHAN_MAX);
        loop {
            let last = st.seq;
            let v = self.wait(st.spin, until, |v| v != last)?;
            // the client's fields, each read once
            let p = self.peer();
            let len = self.side(p, offset_of!(ChanSide, len)).load(Relaxed) as usize;
            let cap = self.side(p, offset_of!(ChanSide, arg)).load(Relaxed) as usize;
            st.seq = v;
            if len > room {
                self.answer(v, 0, libc::EMSGSIZE as u32);
                continue;
            }
            self.data.copy_out(CHAN_REQ_OFF, &mut buf[..len]);
            st.in_service = true;
            st.room = cap.min(CHAN_MAX);
            return Ok(len);
        }
    }

    fn answer(&self, seq: u32, len: usize, status: u32) {
        let me = self.mine();
        self.side(me, offset_of!(ChanSide, len))
            .store(len as u32, Relaxed);
        self.side(me, offset_of!(ChanSide, arg))
            .store(status, Relaxed);
        self.publish(seq);
    }

    /// Server: answers the request received last. ENOENT: none;
    /// EMSGSIZE: longer than the client's room (the request stays
    /// unanswered: reply again).
    pub fn reply(&self, resp: &[u8]) -> Result<(), ExecError> {
        if self.role != Role::Server {
            return Err(errno(libc::EINVAL));
        }
        let mut st = self.lock();
        if !st.in_service {
            return Err(errno(libc::ENOENT));
        }
        if resp.len() > st.room {
            return Err(errno(libc::EMSGSIZE));
        }
        self.open_now()?;
        self.data.copy_in(CHAN_RESP_OFF, resp);
        st.in_service = false;
        self.answer(st.seq, resp.len(), 0);
        Ok(())
    }

    /// Server: [`Channel::reply`] (if a request is in service), then
    /// [`Channel::receive`].
    pub fn reply_receive(
        &self,
        resp: &[u8],
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<usize, ExecError> {
        if self.lock().in_service {
            self.reply(resp)?;
        }
        self.receive(buf, timeout)
    }
}

impl Drop for Channel {
    /// Tells the executive, which closes the channel for the peer (its
    /// next wait fails with EPIPE); the mappings and fds go with self.
    fn drop(&mut self) {
        exec_trap(SYS_EXEC, OP_RPC_CLOSE, [u64::from(self.id), 0, 0, 0, 0]);
    }
}

// ---- C ABI (include/mantle/exec.h): a `mantle_chan *` is a boxed
// Channel; results are >= 0 or -errno; a timeout < 0 means no limit.

fn c_timeout(ns: i64) -> Option<Duration> {
    u64::try_from(ns).ok().map(Duration::from_nanos)
}

fn c_err(e: ExecError) -> i64 {
    -i64::from(e.errno())
}

/// # Safety
/// `out` points to a writable pointer.
unsafe fn give(r: Result<Channel, ExecError>, out: *mut *mut Channel) -> i32 {
    match r {
        Ok(c) if !out.is_null() => {
            // SAFETY: the caller passes a writable `mantle_chan **`.
            unsafe { out.write_unaligned(Box::into_raw(Box::new(c))) };
            0
        }
        Ok(_) => -libc::EFAULT,
        Err(e) => -e.errno(),
    }
}

/// `int mantle_chan_connect(uint32_t server, mantle_chan **out)`.
///
/// # Safety
/// `out` is NULL or points to a writable `mantle_chan *`.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_connect(server: u32, out: *mut *mut Channel) -> i32 {
    if out.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: as this function's contract.
    unsafe { give(Channel::connect(server), out) }
}

/// `int mantle_chan_accept(mantle_chan **out)`.
///
/// # Safety
/// `out` is NULL or points to a writable `mantle_chan *`.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_accept(out: *mut *mut Channel) -> i32 {
    if out.is_null() {
        return -libc::EFAULT;
    }
    // SAFETY: as this function's contract.
    unsafe { give(Channel::accept(), out) }
}

/// A `(ptr, len)` of the caller's as a slice (empty for len 0).
///
/// # Safety
/// `p` points to `len` readable bytes (or len is 0).
unsafe fn slice<'a>(p: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    // SAFETY: the caller's contract.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// # Safety
/// `p` points to `len` writable bytes (or len is 0).
unsafe fn slice_mut<'a>(p: *mut std::ffi::c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    // SAFETY: the caller's contract.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
}

/// `int64_t mantle_chan_call(mantle_chan *ch, const void *req, size_t len,
/// void *resp, size_t cap, int64_t timeout_ns)`: the reply's length.
///
/// # Safety
/// `ch` from connect, not closed; req/resp valid for len/cap bytes.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_call(
    ch: *const Channel,
    req: *const std::ffi::c_void,
    len: usize,
    resp: *mut std::ffi::c_void,
    cap: usize,
    timeout_ns: i64,
) -> i64 {
    // SAFETY: the caller's contract.
    let (Some(c), Some(q), Some(r)) =
        (unsafe { ch.as_ref() }, unsafe { slice(req, len) }, unsafe {
            slice_mut(resp, cap)
        })
    else {
        return -i64::from(libc::EFAULT);
    };
    c.call(q, r, c_timeout(timeout_ns))
        .map_or_else(c_err, |n| n as i64)
}

/// `int64_t mantle_chan_receive(mantle_chan *ch, void *buf, size_t cap,
/// int64_t timeout_ns)`: the request's length.
///
/// # Safety
/// `ch` from accept, not closed; buf valid for cap bytes.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_receive(
    ch: *const Channel,
    buf: *mut std::ffi::c_void,
    cap: usize,
    timeout_ns: i64,
) -> i64 {
    // SAFETY: the caller's contract.
    let (Some(c), Some(b)) = (unsafe { ch.as_ref() }, unsafe { slice_mut(buf, cap) }) else {
        return -i64::from(libc::EFAULT);
    };
    c.receive(b, c_timeout(timeout_ns))
        .map_or_else(c_err, |n| n as i64)
}

/// `int mantle_chan_reply(mantle_chan *ch, const void *resp, size_t len)`.
///
/// # Safety
/// `ch` from accept, not closed; resp valid for len bytes.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_reply(
    ch: *const Channel,
    resp: *const std::ffi::c_void,
    len: usize,
) -> i32 {
    // SAFETY: the caller's contract.
    let (Some(c), Some(r)) = (unsafe { ch.as_ref() }, unsafe { slice(resp, len) }) else {
        return -libc::EFAULT;
    };
    c.reply(r).map_or_else(|e| -e.errno(), |()| 0)
}

/// `int64_t mantle_chan_reply_receive(mantle_chan *ch, const void *resp,
/// size_t len, void *buf, size_t cap, int64_t timeout_ns)`.
///
/// # Safety
/// As mantle_chan_reply and mantle_chan_receive.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_reply_receive(
    ch: *const Channel,
    resp: *const std::ffi::c_void,
    len: usize,
    buf: *mut std::ffi::c_void,
    cap: usize,
    timeout_ns: i64,
) -> i64 {
    // SAFETY: the caller's contract.
    let (Some(c), Some(r), Some(b)) = (
        unsafe { ch.as_ref() },
        unsafe { slice(resp, len) },
        unsafe { slice_mut(buf, cap) },
    ) else {
        return -i64::from(libc::EFAULT);
    };
    c.reply_receive(r, b, c_timeout(timeout_ns))
        .map_or_else(c_err, |n| n as i64)
}

/// `void mantle_chan_set_spin(mantle_chan *ch, uint64_t spin_ns)`.
///
/// # Safety
/// `ch` from connect or accept, not closed.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_set_spin(ch: *const Channel, spin_ns: u64) {
    // SAFETY: the caller's contract.
    if let Some(c) = unsafe { ch.as_ref() } {
        c.set_spin(Duration::from_nanos(spin_ns));
    }
}

/// `uint32_t mantle_chan_id(const mantle_chan *ch)`.
///
/// # Safety
/// `ch` from connect or accept, not closed.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_id(ch: *const Channel) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { ch.as_ref() }.map_or(0, |c| c.id())
}

/// `void mantle_chan_close(mantle_chan *ch)`: the peer's next wait fails
/// with -EPIPE.
///
/// # Safety
/// `ch` from connect or accept (or NULL), not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mantle_chan_close(ch: *mut Channel) {
    if !ch.is_null() {
        // SAFETY: made by Box::into_raw in give; the caller gives it back.
        drop(unsafe { Box::from_raw(ch) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_an_executive_there_is_no_channel() {
        assert_eq!(Channel::connect(0).unwrap_err(), ExecError::NotAGuest);
        assert_eq!(Channel::accept().unwrap_err(), ExecError::NotAGuest);
    }

    /// Two ends of one channel in this process (what the executive's
    /// broker makes), and the ctl page's writable mapping (the
    /// executive's).
    fn pair() -> (Channel, Channel, SharedMem) {
        let data = SharedMem::create(c"mantle-test", CHAN_DATA_SIZE).unwrap();
        let ctl = SharedMem::create(c"mantle-test", CHAN_CTL_SIZE).unwrap();
        for (off, v) in [(0, CHAN_MAGIC), (4, CHAN_VERSION), (8, CHAN_OPEN), (12, 7)] {
            ctl.u32(off).unwrap().store(v, SeqCst);
        }
        let end = |role| Channel {
            data: SharedMem::map(data.fd().try_clone().unwrap(), CHAN_DATA_SIZE).unwrap(),
            ctl: SharedMem::map_readonly(ctl.fd().try_clone().unwrap(), CHAN_CTL_SIZE).unwrap(),
            id: 7,
            role,
            st: Mutex::new(State {
                seq: 0,
                late: false,
                in_service: false,
                room: 0,
                spin: DEFAULT_SPIN,
            }),
        };
        (end(Role::Client), end(Role::Server), ctl)
    }

    #[test]
    fn calls_carry_bytes_both_ways_between_threads() {
        let (c, s, _ctl) = pair();
        let server = std::thread::spawn(move || {
            let mut b = vec![0u8; CHAN_MAX];
            let mut n = s.receive(&mut b, Some(Duration::from_secs(10))).unwrap();
            while &b[..n] != b"!" {
                let r: Vec<u8> = b[..n].iter().rev().copied().collect();
                n = s
                    .reply_receive(&r, &mut b, Some(Duration::from_secs(10)))
                    .unwrap();
            }
            // longer than the client's room: refused, the request stays
            assert_eq!(s.reply(b"bye"), Err(errno(libc::EMSGSIZE)));
            s.reply(b"ok").unwrap();
        });
        let mut resp = vec![0u8; CHAN_MAX];
        for len in (0..=CHAN_MAX).step_by(97).chain([CHAN_MAX]) {
            let req: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
            let n = c
                .call(&req, &mut resp, Some(Duration::from_secs(10)))
                .unwrap();
            let want: Vec<u8> = req.iter().rev().copied().collect();
            assert_eq!(&resp[..n], &want[..], "len {len}");
        }
        let big = vec![0u8; CHAN_MAX + 1];
        assert_eq!(c.call(&big, &mut resp, None), Err(errno(libc::EMSGSIZE)));
        // room for 2 bytes: the server's 3-byte reply is refused to it
        let n = c
            .call(b"!", &mut resp[..2], Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(&resp[..n], b"ok");
        server.join().unwrap();
    }

    #[test]
    fn a_silent_server_times_out_and_its_late_answer_is_skipped() {
        let (c, s, _ctl) = pair();
        let mut resp = [0u8; 8];
        let t0 = Instant::now();
        let r = c.call(b"one", &mut resp, Some(Duration::from_millis(50)));
        assert_eq!(r, Err(errno(libc::ETIMEDOUT)));
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let server = std::thread::spawn(move || {
            let mut b = [0u8; 8];
            let n = s.receive(&mut b, None).unwrap();
            assert_eq!(&b[..n], b"one");
            s.reply(b"late").unwrap();
            let n = s.receive(&mut b, None).unwrap();
            assert_eq!(&b[..n], b"two");
            s.reply(b"2").unwrap();
        });
        let n = c
            .call(b"two", &mut resp, Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(&resp[..n], b"2");
        server.join().unwrap();
    }

    #[test]
    fn a_revoked_channel_ends_a_wait_without_a_timeout_at_once() {
        let (c, s, ctl) = pair();
        let t = std::thread::spawn(move || {
            let mut resp = [0u8; 8];
            let t0 = Instant::now();
            (c.call(b"x", &mut resp, None), t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        // as the executive's Chan::end: state, then both words moved, woken
        ctl.u32(8).unwrap().store(3, SeqCst);
        for off in [CHAN_CLIENT_OFF, CHAN_SERVER_OFF] {
            let w = s.data.u32(off).unwrap();
            w.fetch_xor(1 << 31, SeqCst);
            mantle_sys::shm::futex_wake_all(w);
        }
        let (r, took) = t.join().unwrap();
        assert_eq!(r, Err(errno(libc::ECONNRESET)));
        assert!(took < Duration::from_secs(5), "{took:?}");
        let mut b = [0u8; 8];
        assert_eq!(s.receive(&mut b, None), Err(errno(libc::ECONNRESET)));
    }

    #[test]
    fn the_layout_fits_the_mapping() {
        const { assert!(CHAN_SERVER_OFF + size_of::<ChanSide>() <= CHAN_REQ_OFF) };
        const { assert!(CHAN_RESP_OFF + CHAN_MAX <= CHAN_DATA_SIZE) };
    }
}

//! Calls to the executive from a guest (`mantle run`): a ping, and RPC
//! between two guests through the executive. C: `include/mantle/exec.h`.
//!
//! Mechanism: one system call with a number no kernel has
//! (mantle_abi::exec::SYS_EXEC), which the executive's seccomp filter
//! sends to the executive (docs/exec.md "RPC"); no socket, no shared
//! memory. Not under an executive, the kernel answers -ENOSYS: every
//! function then fails with [`ExecError::NotAGuest`]. A program that never
//! calls these is unchanged.
//!
//! Invariants: the executive writes only into the (pointer, capacity)
//! ranges passed for that purpose (the receive buffer, the response
//! buffer); the Rust functions take slices, so those ranges are the
//! caller's own memory.

use mantle_abi::exec::{
    rpc_recv_split, OP_PING, OP_RPC_CALL, OP_RPC_RECV, OP_RPC_REPLY, OP_RPC_REPLY_RECV, SYS_EXEC,
};
use mantle_sys::supervise::exec_trap;
use std::ffi::{c_int, c_void};

/// The ops of [`exec_call`] (see mantle_abi::exec).
pub use mantle_abi::exec::{OP_PING as EXEC_PING, RPC_MAX};

/// Why a call to the executive failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// ENOSYS: this process is not a guest of an executive.
    NotAGuest,
    /// Any other errno the executive answered (docs/exec.md "RPC").
    Errno(i32),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::NotAGuest => write!(f, "not a guest of a mantle executive (ENOSYS)"),
            ExecError::Errno(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

impl std::error::Error for ExecError {}

impl ExecError {
    /// The errno (ENOSYS for [`ExecError::NotAGuest`]).
    pub fn errno(&self) -> i32 {
        match self {
            ExecError::NotAGuest => libc::ENOSYS,
            ExecError::Errno(e) => *e,
        }
    }
}

fn check(r: i64) -> Result<i64, ExecError> {
    match r {
        r if r >= 0 => Ok(r),
        r if r == -i64::from(libc::ENOSYS) => Err(ExecError::NotAGuest),
        r => Err(ExecError::Errno((-r) as i32)),
    }
}

fn trap(op: u64, a: [u64; 5]) -> i64 {
    exec_trap(SYS_EXEC, op, a)
}

/// One call to the executive with one argument; raw result (>= 0 or
/// -errno). [`EXEC_PING`] returns the executive's pid. The RPC ops with
/// only their first argument carry no buffer (the executive writes
/// nothing).
pub fn exec_call(op: u64, arg: u64) -> i64 {
    trap(op, [arg, 0, 0, 0, 0])
}

/// The executive's pid (a guest → executive → guest round trip).
pub fn ping() -> Result<u32, ExecError> {
    check(exec_call(OP_PING, 0)).map(|v| v as u32)
}

/// A received request: answer it with [`rpc_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(pub u32);

/// Sends `req` to guest `server` (its index in the system: `[[guest]]`
/// order, from 0) and waits for the reply, written into `resp`; returns
/// its length.
pub fn rpc_call(server: u32, req: &[u8], resp: &mut [u8]) -> Result<usize, ExecError> {
    let r = trap(
        OP_RPC_CALL,
        [
            u64::from(server),
            req.as_ptr() as u64,
            req.len() as u64,
            resp.as_mut_ptr() as u64,
            resp.len() as u64,
        ],
    );
    check(r).map(|v| v as usize)
}

/// Waits for the next request to this guest; it is written into `buf`.
pub fn rpc_receive(buf: &mut [u8]) -> Result<(Token, usize), ExecError> {
    let r = trap(
        OP_RPC_RECV,
        [buf.as_mut_ptr() as u64, buf.len() as u64, 0, 0, 0],
    );
    check(r).map(|v| {
        let (t, n) = rpc_recv_split(v);
        (Token(t), n)
    })
}

/// Answers the request `token` with `resp`.
pub fn rpc_reply(token: Token, resp: &[u8]) -> Result<(), ExecError> {
    let r = trap(
        OP_RPC_REPLY,
        [
            u64::from(token.0),
            resp.as_ptr() as u64,
            resp.len() as u64,
            0,
            0,
        ],
    );
    check(r).map(|_| ())
}

/// Answers `token` (None: nothing to answer) with `resp` and waits for
/// the next request, written into `buf`, in one trap.
pub fn rpc_reply_receive(
    token: Option<Token>,
    resp: &[u8],
    buf: &mut [u8],
) -> Result<(Token, usize), ExecError> {
    let r = trap(
        OP_RPC_REPLY_RECV,
        [
            u64::from(token.map_or(0, |t| t.0)),
            resp.as_ptr() as u64,
            resp.len() as u64,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
        ],
    );
    check(r).map(|v| {
        let (t, n) = rpc_recv_split(v);
        (Token(t), n)
    })
}

// ---- C ABI (include/mantle/exec.h). Pointers are passed to the executive
// as numbers, never dereferenced here: the executive reads and writes them
// in the caller with process_vm_readv/writev, within the given lengths.

/// `int64_t mantle_exec_call(uint64_t op, uint64_t arg)`.
#[no_mangle]
pub extern "C" fn mantle_exec_call(op: u64, arg: u64) -> i64 {
    exec_call(op, arg)
}

/// `int64_t mantle_rpc_call(uint32_t server, const void *req, size_t
/// req_len, void *resp, size_t resp_cap)`: the reply's length or -errno.
#[no_mangle]
pub extern "C" fn mantle_rpc_call(
    server: u32,
    req: *const c_void,
    req_len: usize,
    resp: *mut c_void,
    resp_cap: usize,
) -> i64 {
    trap(
        OP_RPC_CALL,
        [
            u64::from(server),
            req as u64,
            req_len as u64,
            resp as u64,
            resp_cap as u64,
        ],
    )
}

/// `int64_t mantle_rpc_receive(void *buf, size_t cap, uint32_t *token)`:
/// the request's length or -errno; the token is stored in `*token`.
///
/// # Safety
/// `token` is NULL or points to a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn mantle_rpc_receive(buf: *mut c_void, cap: usize, token: *mut u32) -> i64 {
    let r = trap(OP_RPC_RECV, [buf as u64, cap as u64, 0, 0, 0]);
    if r < 0 {
        return r;
    }
    let (t, n) = rpc_recv_split(r);
    if !token.is_null() {
        // SAFETY: exec.h asks for NULL or a pointer to a writable
        // uint32_t; write_unaligned does not assume its alignment.
        unsafe { token.write_unaligned(t) };
    }
    n as i64
}

/// `int64_t mantle_rpc_reply_receive(uint32_t token, const void *resp,
/// size_t len, void *buf, size_t cap, uint32_t *next)`: answers `token`
/// (0: none) and waits for the next request; as mantle_rpc_receive.
///
/// # Safety
/// `next` is NULL or points to a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn mantle_rpc_reply_receive(
    token: u32,
    resp: *const c_void,
    len: usize,
    buf: *mut c_void,
    cap: usize,
    next: *mut u32,
) -> i64 {
    let r = trap(
        OP_RPC_REPLY_RECV,
        [
            u64::from(token),
            resp as u64,
            len as u64,
            buf as u64,
            cap as u64,
        ],
    );
    if r < 0 {
        return r;
    }
    let (t, n) = rpc_recv_split(r);
    if !next.is_null() {
        // SAFETY: exec.h asks for NULL or a pointer to a writable
        // uint32_t; write_unaligned does not assume its alignment.
        unsafe { next.write_unaligned(t) };
    }
    n as i64
}

/// `int mantle_rpc_reply(uint32_t token, const void *buf, size_t len)`:
/// 0 or -errno.
#[no_mangle]
pub extern "C" fn mantle_rpc_reply(token: u32, buf: *const c_void, len: usize) -> c_int {
    trap(
        OP_RPC_REPLY,
        [u64::from(token), buf as u64, len as u64, 0, 0],
    ) as c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_an_executive_everything_is_not_a_guest() {
        assert_eq!(exec_call(OP_PING, 0), -i64::from(libc::ENOSYS));
        assert_eq!(ping(), Err(ExecError::NotAGuest));
        let mut b = [0u8; 4];
        assert_eq!(rpc_call(0, b"x", &mut b), Err(ExecError::NotAGuest));
        assert_eq!(rpc_receive(&mut b), Err(ExecError::NotAGuest));
        assert_eq!(rpc_reply(Token(1), b"x"), Err(ExecError::NotAGuest));
        let mut t = 0u32;
        assert_eq!(
            // SAFETY: b is 4 writable bytes, &mut t a writable u32.
            unsafe { mantle_rpc_receive(b.as_mut_ptr().cast(), 4, &mut t) },
            -i64::from(libc::ENOSYS)
        );
        assert_eq!(mantle_rpc_reply(1, std::ptr::null(), 0), -libc::ENOSYS);
        assert_eq!(ExecError::NotAGuest.errno(), libc::ENOSYS);
    }
}

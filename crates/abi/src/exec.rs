//! The executive's shared layouts (executive ↔ guest): the fast path's
//! region of shared memory, and the numbers of the calls a guest makes to
//! its executive ([`SYS_EXEC`]: ping and guest ↔ guest RPC, mirrored in
//! `include/mantle/exec.h`). The region is the Rust mirror of
//! `crates/exec/stub/fast.h`, the one C definition (the stub preloaded into
//! guests includes it).
//!
//! One memfd, created by the executive, mapped `MAP_SHARED` by the
//! executive and by every guest process that loaded the stub:
//!
//! ```text
//! 0                  4096                 4096 + S*128, page-rounded (= paths_off)
//! +------------------+--------------------+----------------------------+-------------------+
//! | FastHdr (336 B,  | FastSlot[S]        | path buffers, 4096 B each, | FastCount[1024]   |
//! | rest of the page | (128 B each, one   | one per slot (executive-   | (32 B each, the   |
//! | reserved)        | per guest thread)  | written replacement paths) | stub's counters)  |
//! +------------------+--------------------+----------------------------+-------------------+
//!
//! FastHdr
//! 0  magic    4 version  8 nslots     12 slot_size  16 region_size (u64)
//! 24 exec_pid 28 spin   32 doorbell   36 exec_sleeping
//! 40 overflow 44 flags  48 paths_off (u64)          56 tramp (u64)
//! 64 wanted[16] (u64 bitmap of trapped call numbers, 0..1024)
//! 192 hwm     196 frees 200 exec_gone 204 reserved
//! 208 counted[16] (u64 bitmap of calls the stub counts itself)       336
//!
//! FastCount (at counts_off(S), one per call number)
//! 0 calls (u64)  8 errors (u64)  16 ticks (u64, TSC)  24 timed (u64)  32
//!
//! FastSlot
//! 0  state    4 tid      8 seq (u64)
//! 16 nr      20 flags   24 args[6] (u64)
//! 72 ip (u64)           80 result (i64)
//! 88 report_seq (u64)   96 report_result (i64)
//! 104 base (u64)        112 t_trap (u64)
//! 120 waiting           124 gen                                    128
//! ```
//!
//! S (`nslots`) is a capacity (default thousands): the memfd is sparse, so
//! only pages that were touched are memory. Slots `[0, hwm)` were claimed
//! at some time; the executive scans only those (`hwm` bounded by its own
//! capacity: the guest may write anything there).
//!
//! Who writes what in a slot (the state word is the futex word; `state`
//! and `tid` form one 8-byte word, [`pair`], changed together by CAS when
//! a slot changes owner or is answered):
//!
//! | state   | set by    | meaning                                             |
//! |---------|-----------|-----------------------------------------------------|
//! | FREE    | guest, executive | no owner (`tid` 0): released at exit, or reclaimed from a dead owner |
//! | IDLE    | guest     | claimed (FREE,0 → IDLE,tid by CAS; `gen` + 1)       |
//! | REQUEST | guest     | `seq`+1, `nr`, `args`, `ip`, `t_trap` written; waits |
//! | ANSWER  | executive | `result`, `flags` (and changed `nr`/`args`; with UNTIL the TSC deadline in `args[0]`) written |
//! | DONE    | guest     | `CONTINUE` call performed: `report_seq`/`report_result` |
//!
//! Trust: every byte is writable by the guest. The executive copies a slot
//! out, validates the copy (state, owner tid and `gen`, `seq` = its own count + 1,
//! `nr` < [`NR_MAX`]) and keeps its own state in its own memory; any bit
//! pattern is a value ([`FromBytes`]).

use crate::offsets;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const FAST_MAGIC: u32 = 0x5046_584d;
pub const FAST_VERSION: u32 = 3;
pub const FAST_HDR_SIZE: usize = 4096;
pub const FAST_SLOT_SIZE: usize = 128;
pub const FAST_PATH_SIZE: usize = 4096;
/// Largest capacity of a region (slots).
pub const FAST_MAX_SLOTS: usize = 65536;
/// Call numbers at or above this are refused (and never trapped).
pub const NR_MAX: u32 = 1024;
pub const WANT_WORDS: usize = (NR_MAX / 64) as usize;

/// Slot states (`enum mx_fast_state`).
pub const ST_FREE: u32 = 0;
pub const ST_IDLE: u32 = 1;
pub const ST_REQUEST: u32 = 2;
pub const ST_ANSWER: u32 = 3;
pub const ST_DONE: u32 = 4;
pub const ST_MAX: u32 = 5;

/// Header flag: the stub rewrites `mov $nr,%eax; syscall` sites it traps
/// into jumps to per-site stubs (`MX_HDR_REWRITE`).
pub const HDR_REWRITE: u32 = 1;

/// Header flag: when the executive is gone, the stub makes the guest's
/// calls itself (unsupervised) instead of killing the process
/// (`MX_HDR_FAIL_OPEN`, `mantle run --fail-open`).
pub const HDR_FAIL_OPEN: u32 = 2;

/// Answer flag: perform `nr`/`args` (as the executive left them) in the
/// guest and report the result (`MX_ANS_CONTINUE`).
pub const ANS_CONTINUE: u32 = 1;

/// Answer flag: return `result`, but not before the guest's TSC reaches
/// `args[0]`: the guest busy-waits the last stretch of a sleep itself
/// (`MX_ANS_UNTIL`, the fast path's extended mode: the executive answers
/// early, then sleeps, so that on a shared CPU the guest, not the
/// executive, spins).
pub const ANS_UNTIL: u32 = 2;

/// `struct mx_fast_hdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FastHdr {
    pub magic: u32,
    pub version: u32,
    pub nslots: u32,
    pub slot_size: u32,
    pub region_size: u64,
    pub exec_pid: u32,
    pub spin: u32,
    pub doorbell: u32,
    /// Executive threads (about to be) asleep on `doorbell`: a guest that
    /// rings wakes them all.
    pub exec_sleeping: u32,
    pub overflow: u32,
    pub hdr_flags: u32,
    pub paths_off: u64,
    /// Fixed address where the stub maps its one exempt syscall
    /// instruction (the same in every image of the guest, so that the
    /// seccomp filter installed by the first image stays right after exec).
    pub tramp: u64,
    pub wanted: [u64; WANT_WORDS],
    /// Slots `[0, hwm)` were claimed at some time (the guest raises it by
    /// CAS, never above `nslots`; a claim: the executive bounds it).
    pub hwm: u32,
    /// Slots released (at a thread's exit) or reclaimed (from a dead
    /// owner) so far: a thread that found none free tries again when this
    /// changed.
    pub frees: u32,
    /// Set by a guest that found the executive gone under `HDR_FAIL_OPEN`:
    /// every guest then makes its calls itself.
    pub exec_gone: u32,
    pub reserved: u32,
    /// Calls the stub counts itself into the [`FastCount`]s (no hand-off).
    pub counted: [u64; WANT_WORDS],
}
offsets!(FastHdr: magic @ 0, version @ 4, nslots @ 8, slot_size @ 12, region_size @ 16,
    exec_pid @ 24, spin @ 28, doorbell @ 32, exec_sleeping @ 36, overflow @ 40,
    hdr_flags @ 44, paths_off @ 48, tramp @ 56, wanted @ 64, hwm @ 192, frees @ 196,
    exec_gone @ 200, reserved @ 204, counted @ 208);
const _: () = assert!(size_of::<FastHdr>() == 336);

/// `struct mx_fast_count`: one call number's counters, written by every
/// guest process with atomic adds (claims: a guest may write anything).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct FastCount {
    /// Calls made (counted on entry: exit and exec too).
    pub calls: u64,
    /// Results in -4095..=-1.
    pub errors: u64,
    /// TSC ticks from the trap to the result, summed over the timed calls.
    pub ticks: u64,
    /// Calls timed: one in [`FAST_TIME_EVERY`] of each thread's counted
    /// calls (a TSC read costs more than the rest of the counting).
    pub timed: u64,
}
offsets!(FastCount: calls @ 0, errors @ 8, ticks @ 16, timed @ 24);
pub const FAST_COUNT_SIZE: usize = 32;
pub const FAST_TIME_EVERY: u32 = 8;
const _: () = assert!(size_of::<FastCount>() == FAST_COUNT_SIZE);

/// `struct mx_fast_slot`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FastSlot {
    pub state: u32,
    pub tid: u32,
    pub seq: u64,
    pub nr: u32,
    pub flags: u32,
    pub args: [u64; 6],
    pub ip: u64,
    pub result: i64,
    pub report_seq: u64,
    pub report_result: i64,
    pub base: u64,
    pub t_trap: u64,
    pub waiting: u32,
    /// The guest adds 1 at each claim: a new owner (a new thread, or the
    /// same tid in a new image after exec) even when the tid is the same.
    pub gen: u32,
}
offsets!(FastSlot: state @ 0, tid @ 4, seq @ 8, nr @ 16, flags @ 20, args @ 24, ip @ 72,
    result @ 80, report_seq @ 88, report_result @ 96, base @ 104, t_trap @ 112,
    waiting @ 120, gen @ 124);
const _: () = assert!(size_of::<FastSlot>() == FAST_SLOT_SIZE);

/// The 8-byte word at a slot's offset 0: `state` in the low half, `tid`
/// in the high half (little-endian x86-64, as `MX_PAIR` in fast.h).
pub const fn pair(state: u32, tid: u32) -> u64 {
    state as u64 | (tid as u64) << 32
}

/// Offset of the slot table.
pub const fn slots_off() -> usize {
    FAST_HDR_SIZE
}

/// Offset of the path buffers for `nslots` slots (page-rounded).
pub const fn paths_off(nslots: usize) -> usize {
    (FAST_HDR_SIZE + nslots * FAST_SLOT_SIZE).div_ceil(4096) * 4096
}

/// Offset of the stub's counters for `nslots` slots (after the paths).
pub const fn counts_off(nslots: usize) -> usize {
    paths_off(nslots) + nslots * FAST_PATH_SIZE
}

/// Size of a region with `nslots` slots.
pub const fn region_size(nslots: usize) -> usize {
    counts_off(nslots) + NR_MAX as usize * FAST_COUNT_SIZE
}

// ---------------------------------------------------------------------
// Calls to the executive (guest -> executive, guest <-> guest RPC).
//
// A guest reaches its executive with a system call number no kernel has,
// [`SYS_EXEC`]: `syscall(SYS_EXEC, op, a1, a2, a3, a4, a5)`. The
// executive's seccomp filter always sends it to the executive (protected
// path), which answers it itself, before any agent; not under an executive
// the kernel answers -ENOSYS ("not a guest"). C mirror:
// `include/mantle/exec.h`.
//
// | op             | a1        | a2       | a3      | a4       | a5       | result (>= 0)          |
// |----------------|-----------|----------|---------|----------|----------|------------------------|
// | [`OP_PING`]    | —         | —        | —       | —        | —        | the executive's pid    |
// | [`OP_RPC_CALL`]| server id | req ptr  | req len | resp ptr | resp cap | reply length           |
// | [`OP_RPC_RECV`]| buf ptr   | buf cap  | —       | —        | —        | `token << 16 \| len`   |
// | [`OP_RPC_REPLY`]| token    | buf ptr  | len     | —        | —        | 0                      |
// | [`OP_RPC_REPLY_RECV`]| token | buf ptr | len     | rbuf ptr | rbuf cap | as RECV                |
//
// A server id is the guest's index in its system (0-based, the order of
// `[[guest]]` in the `--system` file; `mantle run -- CMD` has guest 0).
// Lengths are at most [`RPC_MAX`]. Errors: -errno (see exec.h).
// ---------------------------------------------------------------------

/// The reserved system call number of calls to the executive ("MA").
pub const SYS_EXEC: u32 = 0x4d41;
/// Returns the executive's pid (a guest -> executive -> guest round trip).
pub const OP_PING: u64 = 1;
/// Sends a request to a server guest and waits for its reply.
pub const OP_RPC_CALL: u64 = 2;
/// Waits for the next request to this guest.
pub const OP_RPC_RECV: u64 = 3;
/// Answers a received request by its token.
pub const OP_RPC_REPLY: u64 = 4;
/// Replies (token 0: none) and waits for the next request in one trap
/// (a server's loop: one trap per request instead of two). A reply refused
/// for the server's own fault (ENOENT, EMSGSIZE, EFAULT) is returned
/// without receiving; a client gone (ESRCH) is not an error here.
pub const OP_RPC_REPLY_RECV: u64 = 5;
/// Largest request or reply, in bytes (larger: -EMSGSIZE).
pub const RPC_MAX: usize = 4096;
/// Bits of a RECV result that hold the length (the token is above them).
pub const RPC_LEN_BITS: u32 = 16;
/// Tokens are 1..=RPC_TOKEN_MAX (so that a RECV result stays positive).
pub const RPC_TOKEN_MAX: u32 = 0x7fff_ffff;

const _: () = assert!(SYS_EXEC >= NR_MAX, "never a trapped or real call number");
const _: () = assert!(RPC_MAX < (1 << RPC_LEN_BITS));
const _: () = assert!((RPC_TOKEN_MAX as u64) << RPC_LEN_BITS < i64::MAX as u64);

/// Packs a RECV result.
pub const fn rpc_recv_result(token: u32, len: usize) -> i64 {
    ((token as i64) << RPC_LEN_BITS) | len as i64
}

/// Unpacks a RECV result (>= 0) into (token, len).
pub const fn rpc_recv_split(r: i64) -> (u32, usize) {
    (
        (r >> RPC_LEN_BITS) as u32,
        (r & ((1 << RPC_LEN_BITS) - 1)) as usize,
    )
}

// ---------------------------------------------------------------------
// Guest <-> guest channels: the executive brokers, the guests call each
// other directly through shared memory (docs/exec.md "RPC channels").
//
// `syscall(SYS_EXEC, OP_RPC_CONNECT, server)` in the client and
// `syscall(SYS_EXEC, OP_RPC_ACCEPT)` in the server meet in the executive,
// which checks that the client may call that server, creates two memfds
// and installs both in both guests (SECCOMP_IOCTL_NOTIF_ADDFD); each call
// answers [`chan_fds`] `(ctl << 32) | data`:
//
// * data (CHAN_DATA_SIZE bytes, read-write in both guests, size sealed):
//
// ```text
// 0    ChanHdr   (written once by the executive; nobody needs to trust it)
// 64   ChanSide  the client's line: seq (futex word), len, waiting, cpu, cap
// 128  ChanSide  the server's line: seq (futex word), len, waiting, cpu, status
// 4096 request bytes  (CHAN_MAX)
// 8192 reply bytes    (CHAN_MAX)
// ```
//
// * ctl (one page, written by the executive only: sealed
//   F_SEAL_FUTURE_WRITE after the executive mapped it, so a guest can map
//   it read-only and nothing else): [`ChanCtl`], `state` OPEN until the
//   executive closes or revokes the channel.
//
// A call: the client copies the request, stores `len`, `cap`, then `seq`+1
// (release) and wakes the server if its `waiting` is set; the server
// answers by storing its own `len`, `status`, then `seq` = the request's
// seq. Each side waits for the other's `seq` by spinning a bounded time
// when the peer last ran on another CPU, then FUTEX_WAIT with `waiting` set.
// Every field is peer-writable: each side reads each of the peer's fields
// once into its own memory and bounds it (lengths ≤ CHAN_MAX and the cap
// it asked for; status a small errno), and trusts only the ctl page.
// ---------------------------------------------------------------------

/// Connects this guest (the client) to server guest `a1`: held until the
/// server accepts; answers [`chan_fds`].
pub const OP_RPC_CONNECT: u64 = 6;
/// Waits for a client to connect to this guest; answers [`chan_fds`].
pub const OP_RPC_ACCEPT: u64 = 7;
/// Closes channel `a1` (the `id` of its ctl page): the peer's calls then
/// fail with ECONNRESET. Only its two guests may close it.
pub const OP_RPC_CLOSE: u64 = 8;

pub const CHAN_MAGIC: u32 = 0x4e48_434d; // "MCHN"
pub const CHAN_VERSION: u32 = 1;
/// Largest request or reply on a channel (the old RPC's bound).
pub const CHAN_MAX: usize = RPC_MAX;
/// Offsets in the data memfd.
pub const CHAN_CLIENT_OFF: usize = 64;
pub const CHAN_SERVER_OFF: usize = 128;
pub const CHAN_REQ_OFF: usize = 4096;
pub const CHAN_RESP_OFF: usize = CHAN_REQ_OFF + CHAN_MAX;
pub const CHAN_DATA_SIZE: usize = CHAN_RESP_OFF + CHAN_MAX;
pub const CHAN_CTL_SIZE: usize = 4096;

/// `ChanCtl::state` values.
pub const CHAN_OPEN: u32 = 1;
/// Closed by one of its guests (OP_RPC_CLOSE).
pub const CHAN_CLOSED: u32 = 2;
/// Revoked by the executive: a guest of it ended, or the executive is ending.
pub const CHAN_REVOKED: u32 = 3;

/// `struct mantle_chan_hdr`: offset 0 of the data memfd.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ChanHdr {
    pub magic: u32,
    pub version: u32,
    pub size: u32,
    pub max: u32,
    pub reserved: [u32; 12],
}
offsets!(ChanHdr: magic @ 0, version @ 4, size @ 8, max @ 12, reserved @ 16);
const _: () = assert!(size_of::<ChanHdr>() == 64);

/// `struct mantle_chan_side`: one guest's line in the data memfd (client
/// at [`CHAN_CLIENT_OFF`], server at [`CHAN_SERVER_OFF`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ChanSide {
    /// Client: the request's number (1, 2, ...); server: the number of
    /// the request answered. The futex word.
    pub seq: u32,
    /// Bytes of the request (client) or reply (server).
    pub len: u32,
    /// 1 while this side sleeps in FUTEX_WAIT on the *peer's* seq.
    pub waiting: u32,
    /// The CPU this side last ran on (a hint: spin only across CPUs).
    pub cpu: u32,
    /// Client: room for the reply; server: 0 or an errno answered instead
    /// of a reply (EMSGSIZE: the request was larger than the server's room).
    pub arg: u32,
    pub reserved: [u32; 11],
}
offsets!(ChanSide: seq @ 0, len @ 4, waiting @ 8, cpu @ 12, arg @ 16, reserved @ 20);
const _: () = assert!(size_of::<ChanSide>() == 64);

/// `struct mantle_chan_ctl`: the ctl page, written only by the executive.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ChanCtl {
    pub magic: u32,
    pub version: u32,
    /// [`CHAN_OPEN`], [`CHAN_CLOSED`] or [`CHAN_REVOKED`].
    pub state: u32,
    /// The channel's number in its executive (for OP_RPC_CLOSE).
    pub id: u32,
    pub client: u32,
    pub server: u32,
    pub reserved: [u32; 10],
}
offsets!(ChanCtl: magic @ 0, version @ 4, state @ 8, id @ 12, client @ 16, server @ 20,
    reserved @ 24);
const _: () = assert!(size_of::<ChanCtl>() == 64);

/// Packs a CONNECT/ACCEPT result: both installed fds.
pub const fn chan_fds(data: i32, ctl: i32) -> i64 {
    ((ctl as i64) << 32) | data as i64
}

/// Unpacks a CONNECT/ACCEPT result (>= 0) into (data fd, ctl fd).
pub const fn chan_fds_split(r: i64) -> (i32, i32) {
    ((r & 0xffff_ffff) as i32, (r >> 32) as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_geometry() {
        assert_eq!(paths_off(1), 8192);
        assert_eq!(paths_off(32), 8192);
        assert_eq!(paths_off(33), 12288);
        assert_eq!(counts_off(64), 4096 + 8192 + 64 * 4096);
        assert_eq!(region_size(64), counts_off(64) + 1024 * 32);
        // the largest region stays well below the stub's 1 GiB bound
        assert!(region_size(FAST_MAX_SLOTS) < 1 << 30);
        assert_eq!(pair(ST_REQUEST, 7), 0x7_0000_0002);
    }

    #[test]
    fn recv_results_round_trip() {
        for (t, l) in [(1u32, 0usize), (7, 1), (RPC_TOKEN_MAX, RPC_MAX)] {
            let r = rpc_recv_result(t, l);
            assert!(r > 0);
            assert_eq!(rpc_recv_split(r), (t, l));
        }
    }

    #[test]
    fn channel_geometry() {
        assert_eq!(CHAN_DATA_SIZE, 3 * 4096);
        assert!(CHAN_SERVER_OFF + size_of::<ChanSide>() <= CHAN_REQ_OFF);
        assert_eq!(chan_fds_split(chan_fds(3, 1 << 20)), (3, 1 << 20));
        assert!(chan_fds(i32::MAX, i32::MAX) > 0);
    }

    #[test]
    fn garbage_is_a_value() {
        let s = crate::read::<FastSlot>(&[0xffu8; 128], "mx_fast_slot").unwrap();
        assert_eq!(s.state, u32::MAX);
        assert!(crate::read::<FastSlot>(&[0u8; 127], "mx_fast_slot").is_err());
    }
}

//! The application kernel's shared area (application thread ↔ bootstrap
//! thread of one process, `mantle run --offload`): the Rust mirror of
//! `crates/offload/lib/offload.h`, the one C definition (the preloaded
//! library includes it). The entry is Kågström's Figure 4.3
//! (`apkern_comm_entry_t`): the flag the bootstrap thread watches, the
//! message kind, the program counter, and the system-call message
//! (number, six arguments, result); page-fault messages have no place,
//! the kernel serves page faults on the CPU that takes them.
//!
//! ```text
//! 0                 4096                    4096 + MAX_PAIRS*128
//! +-----------------+-----------------------+
//! | OffloadHdr      | OffloadEntry[pairs]   |   one private anonymous mapping
//! +-----------------+-----------------------+   per process (fork copies it)
//!
//! OffloadEntry
//! 0   bootstrap_has_msg (state, futex word)   4 nr (message kind)
//! 8   pc (u64)
//! 16  syscall.nr (u64)  24 syscall.arg[6] (u64)  72 syscall.ret (i64)
//! 80  seq (u64)         88 check (u64)           96 uc (u64)
//! 104 intr_seq (u64)
//! 112 app_tid  116 boot_tid  120 boot_sleeping  124 app_sleeping     128
//! ```
//!
//! Every byte is the application's memory: the bootstrap thread copies a
//! message out, validates the copy ([`check`], the state, the kind, the
//! number, a sequence above the last one served) and refuses what does not
//! validate.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const OK_MAGIC: u32 = 0x4b4f_584d;
pub const OK_VERSION: u32 = 1;
pub const OK_HDR_SIZE: usize = 4096;
pub const OK_ENTRY_SIZE: usize = 128;
pub const OK_MAX_PAIRS: usize = 1024;
pub const OK_STACK_SIZE: usize = 65536;
/// Call numbers the tables cover (x86-64 has fewer than 512).
pub const OK_NR_MAX: usize = 512;

/// `enum mx_ok_state` (`bootstrap_has_msg`).
pub const OK_GONE: u32 = 0;
pub const OK_CLAIMED: u32 = 1;
pub const OK_IDLE: u32 = 2;
pub const OK_REQUEST: u32 = 3;
pub const OK_ANSWER: u32 = 4;
pub const OK_REFUSED: u32 = 5;
pub const OK_STATE_MAX: u32 = 6;

/// `enum mx_ok_kind` (`nr`).
pub const OK_SYSCALL: u32 = 1;
pub const OK_CLONE: u32 = 2;
pub const OK_EXIT: u32 = 3;
pub const OK_KIND_MAX: u32 = 4;

/// `struct mx_ok_hdr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OffloadHdr {
    pub magic: u32,
    pub version: u32,
    pub npairs: u32,
    pub entry_size: u32,
    pub boot_cpu: u32,
    /// Spin iterations before a FUTEX_WAIT, on both sides.
    pub spin: u32,
    /// Messages refused by a bootstrap thread.
    pub refused: u32,
    /// Pairs created in this process.
    pub pairs_made: u32,
    /// Calls that entered the trap (SIGSYS) in this process; calls from
    /// rewritten sites do not (they are the rest).
    pub traps: u32,
    /// Sites rewritten in this process.
    pub sites: u32,
}
crate::offsets!(OffloadHdr: magic @ 0, version @ 4, npairs @ 8, entry_size @ 12,
    boot_cpu @ 16, spin @ 20, refused @ 24, pairs_made @ 28, traps @ 32, sites @ 36);
const _: () = assert!(size_of::<OffloadHdr>() == 40);

/// `struct mx_ok_syscall`: the system-call member of the paper's union.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OffloadSyscall {
    pub nr: u64,
    pub arg: [u64; 6],
    pub ret: i64,
}
crate::offsets!(OffloadSyscall: nr @ 0, arg @ 8, ret @ 56);
const _: () = assert!(size_of::<OffloadSyscall>() == 64);

/// `struct mx_ok_entry`: one per application thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct OffloadEntry {
    /// [`OK_GONE`].. [`OK_REFUSED`]; the futex word.
    pub bootstrap_has_msg: u32,
    /// [`OK_SYSCALL`], [`OK_CLONE`], [`OK_EXIT`].
    pub nr: u32,
    pub pc: u64,
    pub syscall: OffloadSyscall,
    pub seq: u64,
    pub check: u64,
    pub uc: u64,
    pub intr_seq: u64,
    pub app_tid: u32,
    pub boot_tid: u32,
    pub boot_sleeping: u32,
    pub app_sleeping: u32,
}
crate::offsets!(OffloadEntry: bootstrap_has_msg @ 0, nr @ 4, pc @ 8, syscall @ 16, seq @ 80,
    check @ 88, uc @ 96, intr_seq @ 104, app_tid @ 112, boot_tid @ 116,
    boot_sleeping @ 120, app_sleeping @ 124);
const _: () = assert!(size_of::<OffloadEntry>() == OK_ENTRY_SIZE);
const _: () = assert!(OK_HDR_SIZE + OK_MAX_PAIRS * OK_ENTRY_SIZE <= 1 << 20);

/// `mx_ok_check`: the check word of a message (FNV-1a, 64-bit, over the
/// kind, pc, number, arguments and sequence, then the ucontext address).
pub const fn check(kind: u32, pc: u64, s: &OffloadSyscall, seq: u64, uc: u64) -> u64 {
    let w = [
        kind as u64,
        pc,
        s.nr,
        s.arg[0],
        s.arg[1],
        s.arg[2],
        s.arg[3],
        s.arg[4],
        s.arg[5],
        seq,
    ];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < w.len() {
        h ^= w[i];
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h ^= uc;
    h.wrapping_mul(0x0000_0100_0000_01b3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_depends_on_every_field() {
        let s = OffloadSyscall {
            nr: 39,
            arg: [1, 2, 3, 4, 5, 6],
            ret: 0,
        };
        let base = check(OK_SYSCALL, 0x1000, &s, 7, 0x2000);
        assert_ne!(base, check(OK_CLONE, 0x1000, &s, 7, 0x2000));
        assert_ne!(base, check(OK_SYSCALL, 0x1001, &s, 7, 0x2000));
        assert_ne!(base, check(OK_SYSCALL, 0x1000, &s, 8, 0x2000));
        assert_ne!(base, check(OK_SYSCALL, 0x1000, &s, 7, 0x2008));
        for i in 0..6 {
            let mut t = s;
            t.arg[i] ^= 1;
            assert_ne!(base, check(OK_SYSCALL, 0x1000, &t, 7, 0x2000));
        }
        let mut t = s;
        t.ret = -1; // the result is the bootstrap thread's: not checked
        assert_eq!(base, check(OK_SYSCALL, 0x1000, &t, 7, 0x2000));
    }
}

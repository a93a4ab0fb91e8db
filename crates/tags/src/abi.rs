//! Rust mirrors of the structs in `src/bpf/tags.h`, shared with the kernel
//! side. Sizes are asserted here at compile time and field offsets are
//! checked against the BTF of the compiled eBPF object by the `layout` test,
//! so the two halves cannot drift apart silently.

include!(concat!(env!("OUT_DIR"), "/consts.rs"));

/// 64-bit words in a tag vector.
pub const MT_WORDS: usize = MT_TAGS / 64;

/// Which IPC carried a reception (`enum mt_kind`).
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    None = 0,
    Set = 1,
    Fork = 2,
    Signal = 3,
    Pipe = 4,
    UnixStream = 5,
    UnixDgram = 6,
    UnixSeqpacket = 7,
    Tcp = 8,
    Udp = 9,
    Shm = 10,
    Mq = 11,
    Eventfd = 12,
}

impl Kind {
    pub fn from_raw(v: u16) -> Kind {
        match v {
            1 => Kind::Set,
            2 => Kind::Fork,
            3 => Kind::Signal,
            4 => Kind::Pipe,
            5 => Kind::UnixStream,
            6 => Kind::UnixDgram,
            7 => Kind::UnixSeqpacket,
            8 => Kind::Tcp,
            9 => Kind::Udp,
            10 => Kind::Shm,
            11 => Kind::Mq,
            12 => Kind::Eventfd,
            _ => Kind::None,
        }
    }
    /// Short name used in listings and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::Set => "set",
            Kind::Fork => "fork",
            Kind::Signal => "signal",
            Kind::Pipe => "pipe",
            Kind::UnixStream => "unix-stream",
            Kind::UnixDgram => "unix-dgram",
            Kind::UnixSeqpacket => "unix-seqpacket",
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::Shm => "shm",
            Kind::Mq => "mq",
            Kind::Eventfd => "eventfd",
        }
    }
}

pub const ST_FREE: u32 = 0;
pub const ST_LIVE: u32 = 1;
pub const ST_DELETING: u32 = 2;

pub const F_SYSTEM: u32 = 0x1;
pub const F_LIFELINE: u32 = 0x2;
pub const F_USER_SET: u32 = 0x4;
pub const F_GLOBAL: u32 = 0x8;
pub const F_REPLIES: u32 = 0x10;
pub const F_DEADLOCK: u32 = 0x20;
pub const F_ANYONE: u32 = 0x40;
pub const F_PER_REQUEST: u32 = 0x80;

/// `mt_ctl.opts`: sys_exit is never attached (no fd-based channels).
pub const OPT_NO_FD_CHANNELS: u32 = 0x1;

/// Operation codes (`enum mt_op_code`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpCode {
    Set = 1,
    Clear = 2,
    Term = 3,
    Unterm = 4,
    Ttl = 5,
    Class = 6,
    Ping = 7,
    Delete = 8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct View {
    pub vec: [u64; MT_WORDS],
    pub op_seq: u32,
    pub op_err: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Ctl {
    pub live: [u64; MT_WORDS],
    pub system: [u64; MT_WORDS],
    pub lifeline: [u64; MT_WORDS],
    pub deleting: [u64; MT_WORDS],
    pub epoch: u32,
    pub view_size: u32,
    pub host_id: u32,
    pub opts: u32,
    pub host_netns: u64,
    pub global: [u64; MT_WORDS],
    pub cluster_digest: u32,
    pub pad1: u32,
    pub replies: [u64; MT_WORDS],
    pub freed_epoch: [u32; MT_TAGS],
    pub ll_base: [u32; MT_TAGS],
    pub ll_size: [u32; MT_TAGS],
    pub ll_head: [u64; MT_TAGS],
    pub default_ttl: [u8; MT_TAGS],
    pub n_tcp_deps: u64,
    pub n_udp_deps: u64,
    pub n_obj_deps: u64,
    pub deadlock: [u64; MT_WORDS],
    pub anyone: [u64; MT_WORDS],
    pub per_request: [u64; MT_WORDS],
}

/// `struct mt_stats`: per-CPU counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub hops: u64,
    pub rejected: u64,
    pub deposit_fail: u64,
    pub late: u64,
    pub no_view: u64,
    pub opt_written: u64,
    pub opt_parsed: u64,
    pub opt_mismatch: u64,
    pub opt_nospace: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TagEntry {
    pub name: [u8; MT_NAME_LEN],
    pub state: u32,
    pub flags: u32,
    pub created_ns: u64,
    pub generation: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Owner {
    pub uid: u32,
    pub pid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Reception {
    pub ts_ns: u64,
    pub seq: u64,
    pub rx_tid: u32,
    pub rx_pid: u32,
    pub tx_tid: u32,
    pub tx_pid: u32,
    pub kind: u16,
    pub tag: u8,
    pub ttl: u8,
    pub generation: u32,
    pub rx_comm: [u8; MT_COMM_LEN],
    pub lamport: u64,
    pub rx_host: u32,
    pub tx_host: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Op {
    pub code: u32,
    pub tag: u32,
    pub arg: u32,
    pub tid: u32,
    pub pid: u32,
    pub pad: u32,
}

/// `struct mt_admin`: root's change of the frozen table, the context of
/// the `mt_admin` syscall program.
///
/// ```text
///  0 code   4 tag   8 flags  12 ll_base  16 ll_size  20 digest
/// 24 created_ns (u64)  32 default_ttl (u8) + 7 pad  40 name[32]  72
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Admin {
    pub code: u32,
    pub tag: u32,
    pub flags: u32,
    pub ll_base: u32,
    pub ll_size: u32,
    pub digest: u32,
    pub created_ns: u64,
    pub default_ttl: u8,
    pub pad: [u8; 7],
    pub name: [u8; MT_NAME_LEN],
}

/// `struct mt_expire_args`: context of the `mt_arm_expiry` program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExpireArgs {
    pub tag: u32,
    pub ms: u32,
}

/// `enum mt_admin_code`.
pub const ADM_INSTALL: u32 = 1;
pub const ADM_DELETE: u32 = 2;
pub const ADM_DIGEST: u32 = 3;

/// `struct mt_deadlock`: a circular call chain found by the kernel side.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Deadlock {
    pub ts_ns: u64,
    pub lamport: u64,
    pub tag: u32,
    pub generation: u32,
    pub tx_tid: u32,
    pub tx_pid: u32,
    pub tx_host: u32,
    pub rx_pid: u32,
    pub rx_tid: u32,
    pub kind: u16,
    pub denied: u16,
    pub tx_comm: [u8; MT_COMM_LEN],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThreadRec {
    pub tid: u32,
    pub pid: u32,
    pub err: i32,
    pub flags: u32,
    pub vec: [u64; MT_WORDS],
    pub term: [u64; MT_WORDS],
    pub ttl: [u8; MT_TAGS],
    pub comm: [u8; MT_COMM_LEN],
}

const _: () = assert!(MT_TAGS.is_multiple_of(64) && MT_TAGS <= 256);
const _: () = assert!(std::mem::size_of::<View>() == 8 * MT_WORDS + 8);
const _: () = assert!(std::mem::size_of::<TagEntry>() == 56);
const _: () = assert!(std::mem::size_of::<Reception>() == 72);
const _: () = assert!(std::mem::size_of::<Op>() == 24);
const _: () = assert!(std::mem::size_of::<Admin>() == 72);
const _: () = assert!(std::mem::size_of::<Owner>() == 8);
const _: () = assert!(std::mem::size_of::<Deadlock>() == 64);

/// Plain-old-data: every bit pattern is a valid value, so these can be
/// read from and written to map memory as bytes.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of integers and integer arrays.
pub unsafe trait Pod: Copy + 'static {
    fn zeroed() -> Self {
        // SAFETY: Pod types accept the all-zero bit pattern.
        unsafe { std::mem::zeroed() }
    }
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Pod types have no padding-sensitive invariants; reading
        // their bytes is fine.
        unsafe {
            std::slice::from_raw_parts((self as *const Self).cast(), std::mem::size_of::<Self>())
        }
    }
    fn from_bytes(b: &[u8]) -> Self {
        assert!(
            b.len() >= std::mem::size_of::<Self>(),
            "short read of a shared struct"
        );
        // SAFETY: length checked; any bit pattern is valid; read_unaligned
        // copes with byte buffers.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) }
    }
}

// SAFETY: all are repr(C) structs of integers / integer arrays.
unsafe impl Pod for View {}
unsafe impl Pod for Ctl {}
unsafe impl Pod for Stats {}
unsafe impl Pod for TagEntry {}
unsafe impl Pod for Owner {}
unsafe impl Pod for Reception {}
unsafe impl Pod for Op {}
unsafe impl Pod for Admin {}
unsafe impl Pod for ExpireArgs {}
unsafe impl Pod for ThreadRec {}
unsafe impl Pod for Deadlock {}

/// A NUL-padded C string field as a Rust string (lossy).
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The layout test: every shared struct's size and field offsets, in Rust,
/// equal those the eBPF compiler laid out (read from the object's BTF).
#[cfg(test)]
mod layout {
    use super::*;
    use libbpf_rs::btf::Btf;
    use mantle_sys::layout::check_struct as check;
    use mantle_sys::layout_fields as fields;
    use std::mem::size_of;

    #[test]
    fn rust_matches_bpf_object() {
        let btf = Btf::from_path(concat!(env!("OUT_DIR"), "/tags.bpf.o"))
            .expect("read BTF of tags.bpf.o");
        check(
            &btf,
            "mt_view",
            size_of::<View>(),
            fields!(View: vec, op_seq, op_err),
        );
        check(
            &btf,
            "mt_ctl",
            size_of::<Ctl>(),
            fields!(Ctl: live, system, lifeline, deleting, epoch, view_size, host_id, opts, host_netns, global, cluster_digest, pad1, replies, freed_epoch, ll_base, ll_size, ll_head,
                default_ttl, n_tcp_deps, n_udp_deps, n_obj_deps, deadlock, anyone, per_request),
        );
        check(
            &btf,
            "mt_tag",
            size_of::<TagEntry>(),
            fields!(TagEntry: name, state, flags, created_ns, generation, pad),
        );
        check(
            &btf,
            "mt_owner",
            size_of::<Owner>(),
            fields!(Owner: uid, pid),
        );
        check(
            &btf,
            "mt_reception",
            size_of::<Reception>(),
            fields!(Reception: ts_ns, seq, rx_tid, rx_pid, tx_tid, tx_pid, kind, tag, ttl, generation, rx_comm,
                lamport, rx_host, tx_host),
        );
        check(
            &btf,
            "mt_expire_args",
            size_of::<ExpireArgs>(),
            fields!(ExpireArgs: tag, ms),
        );
        check(
            &btf,
            "mt_admin",
            size_of::<Admin>(),
            fields!(Admin: code, tag, flags, ll_base, ll_size, digest, created_ns, default_ttl, pad, name),
        );
        check(
            &btf,
            "mt_op",
            size_of::<Op>(),
            fields!(Op: code, tag, arg, tid, pid, pad),
        );
        check(
            &btf,
            "mt_deadlock",
            size_of::<Deadlock>(),
            fields!(Deadlock: ts_ns, lamport, tag, generation, tx_tid, tx_pid, tx_host, rx_pid, rx_tid, kind, denied, tx_comm),
        );
        check(
            &btf,
            "mt_thread_rec",
            size_of::<ThreadRec>(),
            fields!(ThreadRec: tid, pid, err, flags, vec, term, ttl, comm),
        );
    }
}

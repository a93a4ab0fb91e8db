//! The profiler's shared layouts: Rust mirrors of
//! `crates/prof/src/bpf/prof.h`, the one C definition.
//!
//! | struct   | where it travels                                         |
//! |----------|----------------------------------------------------------|
//! | [`Key`]  | key of the count maps (value: u64 samples), or a record of the sample ring buffer |
//! | [`Stats`]| `stats` per-CPU map: the sample path's counters and self-timing |

use crate::offsets;
use crate::tags::MT_WORDS;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

// Every integer #define of prof.h (build.rs).
include!(concat!(env!("OUT_DIR"), "/prof_consts.rs"));

pub use self::{MP_MODE_KERNEL as MODE_KERNEL, MP_MODE_USER as MODE_USER};

/// `MP_NO_STACK` of prof.h as a key's u64 (generated as u32).
pub const NO_STACK: u64 = MP_NO_STACK as u64;

/// `struct mp_key`: one sample.
///
/// ```text
/// 0 pid (tgid; 0: idle)  4 tid  8 ip (u64)  16 cpu  20 mode (MP_MODE_*)
/// 24 kstack (u64 stack key, MP_NO_STACK: none)  32 ustack (same)
/// 40 tags[W] (the thread's tag vector)
/// 40+8W cgroup (u64 cgroup v2 id)            48+8W end
/// ```
///
/// The stack keys (64-bit hashes of the frames) index the stack map of
/// the same pair as the count map (`stacks0`/`stacks1`), whose values
/// are [`Stack`]s.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Key {
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub cpu: u32,
    pub mode: u32,
    pub kstack: u64,
    pub ustack: u64,
    pub tags: [u64; MT_WORDS],
    /// The task's cgroup v2 id (`bpf_get_current_cgroup_id`).
    pub cgroup: u64,
}
offsets!(Key: pid @ 0, tid @ 4, ip @ 8, cpu @ 16, mode @ 20, kstack @ 24, ustack @ 32, tags @ 40,
    cgroup @ 40 + 8 * MT_WORDS);
const _: () = assert!(size_of::<Key>() == 48 + 8 * MT_WORDS);

/// `struct mp_stack`: one stored stack, `MP_MAX_STACK` u64 frames, leaf
/// first, zero after the last.
///
/// ```text
/// 0 ips[MP_MAX_STACK]   8*MP_MAX_STACK end
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Stack {
    pub ips: [u64; MP_MAX_STACK as usize],
}
offsets!(Stack: ips @ 0);
const _: () = assert!(size_of::<Stack>() == 8 * MP_MAX_STACK as usize);

/// `struct mp_stats`: per-CPU counters of the sample path (9 × u64).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Stats {
    pub samples: u64,
    pub dropped: u64,
    pub ring_full: u64,
    pub t_n: u64,
    pub t_sum: u64,
    pub t_sumsq: u64,
    pub t_min: u64,
    pub t_max: u64,
    pub stack_lost: u64,
}
offsets!(Stats: samples @ 0, dropped @ 8, ring_full @ 16, t_n @ 24, t_sum @ 32,
    t_sumsq @ 40, t_min @ 48, t_max @ 56, stack_lost @ 64);
const _: () = assert!(size_of::<Stats>() == 72);

impl Stats {
    /// Sums per-CPU values (min over CPUs that ran, max over all).
    pub fn merge(&mut self, o: &Stats) {
        self.samples += o.samples;
        self.dropped += o.dropped;
        self.ring_full += o.ring_full;
        self.stack_lost += o.stack_lost;
        self.t_n += o.t_n;
        self.t_sum += o.t_sum;
        self.t_sumsq += o.t_sumsq;
        if o.t_n > 0 && (self.t_min == 0 || o.t_min < self.t_min) {
            self.t_min = o.t_min;
        }
        self.t_max = self.t_max.max(o.t_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_reads_from_native_bytes() {
        let k = Key {
            pid: 1,
            tid: 2,
            ip: 3,
            cpu: 4,
            mode: MODE_KERNEL,
            kstack: 6,
            ustack: NO_STACK,
            tags: [5; MT_WORDS],
            cgroup: 9,
        };
        let mut b = Vec::new();
        for v in [1u32, 2] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&3u64.to_ne_bytes());
        for v in [4u32, 1] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [6u64, 0] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for _ in 0..MT_WORDS {
            b.extend_from_slice(&5u64.to_ne_bytes());
        }
        b.extend_from_slice(&9u64.to_ne_bytes());
        assert_eq!(crate::read::<Key>(&b, "mp_key").unwrap(), k);
        assert_eq!(k.as_bytes(), &b[..]);
        assert!(crate::read::<Key>(&b[..b.len() - 1], "mp_key").is_err());
    }
}

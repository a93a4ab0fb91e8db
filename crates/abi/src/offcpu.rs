//! The off-CPU path's shared layouts (`mantle prof record --off-cpu`):
//! Rust mirrors of `crates/prof/src/bpf/offcpu.h`, the one C definition.
//! Its stacks are the sample path's ([`crate::prof::Stack`], keyed the
//! same way; [`crate::prof::NO_STACK`] for none).
//!
//! | struct       | where it travels                                      |
//! |--------------|-------------------------------------------------------|
//! | [`OffKey`]   | key of `counts`: one thread blocked at one place      |
//! | [`OffVal`]   | value of `counts`: blocked ns and blocks, summed      |
//! | [`OffStats`] | `stats` per-CPU map: the path's counters              |
//! | [`OffCtl`]   | `ctl` array map (one entry), written by user space    |

use crate::offsets;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

// Every integer #define of offcpu.h (build.rs).
include!(concat!(env!("OUT_DIR"), "/offcpu_consts.rs"));

/// `struct mo_key`.
///
/// ```text
/// 0 pid (tgid)  4 tid  8 kstack (u64 stack key)  16 ustack  24 end
/// ```
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OffKey {
    pub pid: u32,
    pub tid: u32,
    pub kstack: u64,
    pub ustack: u64,
}
offsets!(OffKey: pid @ 0, tid @ 4, kstack @ 8, ustack @ 16);
const _: () = assert!(size_of::<OffKey>() == 24);

/// `struct mo_val`: blocked time (ns) and number of blocks, summed.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OffVal {
    pub ns: u64,
    pub blocks: u64,
}
offsets!(OffVal: ns @ 0, blocks @ 8);
const _: () = assert!(size_of::<OffVal>() == 16);

/// `struct mo_stats`: per-CPU counters of the off-CPU path (6 × u64).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OffStats {
    pub switch_out: u64,
    pub switch_in: u64,
    pub dropped: u64,
    pub start_lost: u64,
    pub stack_lost: u64,
    pub dropped_ns: u64,
}
offsets!(OffStats: switch_out @ 0, switch_in @ 8, dropped @ 16, start_lost @ 24,
    stack_lost @ 32, dropped_ns @ 40);
const _: () = assert!(size_of::<OffStats>() == 48);

impl OffStats {
    /// Sums per-CPU values (saturating: values read from a map).
    pub fn merge(&mut self, o: &OffStats) {
        self.switch_out = self.switch_out.saturating_add(o.switch_out);
        self.switch_in = self.switch_in.saturating_add(o.switch_in);
        self.dropped = self.dropped.saturating_add(o.dropped);
        self.start_lost = self.start_lost.saturating_add(o.start_lost);
        self.stack_lost = self.stack_lost.saturating_add(o.stack_lost);
        self.dropped_ns = self.dropped_ns.saturating_add(o.dropped_ns);
    }
}

/// `struct mo_ctl`: blocks that began before `since_ns` (CLOCK_MONOTONIC)
/// are not charged.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct OffCtl {
    pub since_ns: u64,
}
offsets!(OffCtl: since_ns @ 0);
const _: () = assert!(size_of::<OffCtl>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_reads_from_native_bytes() {
        let mut b = Vec::new();
        for v in [7u32, 8] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [9u64, 0] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let k = crate::read::<OffKey>(&b, "mo_key").unwrap();
        assert_eq!((k.pid, k.tid, k.kstack, k.ustack), (7, 8, 9, 0));
        assert!(crate::read::<OffKey>(&b[..23], "mo_key").is_err());
        assert_eq!(MO_FILTER_TGIDS, 1);
    }
}

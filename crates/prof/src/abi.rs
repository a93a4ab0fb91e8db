//! Rust mirrors of `src/bpf/prof.h`. Sizes are asserted at compile time;
//! the `layout` test compares field offsets with the object's BTF.

pub use mantle_tags::abi::{MT_TAGS, MT_WORDS};

pub const MODE_USER: u32 = 0;
pub const MODE_KERNEL: u32 = 1;

/// `struct mp_key`: one sample (count-map key, or ring record).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key {
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub cpu: u32,
    pub mode: u32,
    pub tags: [u64; MT_WORDS],
}

/// `struct mp_stats`: per-CPU counters of the sample path.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub samples: u64,
    pub dropped: u64,
    pub ring_full: u64,
    pub t_n: u64,
    pub t_sum: u64,
    pub t_sumsq: u64,
    pub t_min: u64,
    pub t_max: u64,
}

const _: () = assert!(std::mem::size_of::<Key>() == 24 + 8 * MT_WORDS);
const _: () = assert!(std::mem::size_of::<Stats>() == 64);

impl Key {
    pub fn from_bytes(b: &[u8]) -> Key {
        assert!(b.len() >= std::mem::size_of::<Key>(), "short mp_key");
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        let mut tags = [0u64; MT_WORDS];
        for (i, t) in tags.iter_mut().enumerate() {
            *t = u64_at(24 + 8 * i);
        }
        Key {
            pid: u32_at(0),
            tid: u32_at(4),
            ip: u64_at(8),
            cpu: u32_at(16),
            mode: u32_at(20),
            tags,
        }
    }
}

impl Stats {
    pub fn from_bytes(b: &[u8]) -> Stats {
        assert!(b.len() >= 64, "short mp_stats");
        let f = |i: usize| u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        Stats {
            samples: f(0),
            dropped: f(1),
            ring_full: f(2),
            t_n: f(3),
            t_sum: f(4),
            t_sumsq: f(5),
            t_min: f(6),
            t_max: f(7),
        }
    }
    /// Sums per-CPU values (min over CPUs that ran, max over all).
    pub fn merge(&mut self, o: &Stats) {
        self.samples += o.samples;
        self.dropped += o.dropped;
        self.ring_full += o.ring_full;
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
mod layout {
    use super::*;
    use libbpf_rs::btf::Btf;
    use mantle_sys::layout::check_struct as check;
    use mantle_sys::layout_fields as fields;
    use std::mem::size_of;

    #[test]
    fn rust_matches_bpf_object() {
        let btf = Btf::from_path(concat!(env!("OUT_DIR"), "/prof.bpf.o"))
            .expect("read BTF of prof.bpf.o");
        check(
            &btf,
            "mp_key",
            size_of::<Key>(),
            fields!(Key: pid, tid, ip, cpu, mode, tags),
        );
        check(
            &btf,
            "mp_stats",
            size_of::<Stats>(),
            fields!(Stats: samples, dropped, ring_full, t_n, t_sum, t_sumsq, t_min, t_max),
        );
    }

    #[test]
    fn key_bytes() {
        let k = Key {
            pid: 1,
            tid: 2,
            ip: 3,
            cpu: 4,
            mode: 1,
            tags: [5; MT_WORDS],
        };
        let mut b = Vec::new();
        for v in [1u32, 2] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&3u64.to_ne_bytes());
        for v in [4u32, 1] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for _ in 0..MT_WORDS {
            b.extend_from_slice(&5u64.to_ne_bytes());
        }
        assert_eq!(b.len(), size_of::<Key>());
        assert_eq!(Key::from_bytes(&b), k);
    }
}

//! The profiler's shared layouts live in the ABI crate
//! ([`mantle_abi::prof`], mirrors of `src/bpf/prof.h`; the off-CPU path's
//! in [`mantle_abi::offcpu`], of `src/bpf/offcpu.h`); this module
//! re-exports them under their old path and holds the `layout` test, which
//! needs this crate's compiled eBPF object (field offsets against its BTF).

pub use mantle_abi::prof::*;
pub use mantle_abi::tags::{MT_TAGS, MT_WORDS};

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
            fields!(Key: pid, tid, ip, cpu, mode, kstack, ustack, tags, cgroup),
        );
        check(&btf, "mp_stack", size_of::<Stack>(), fields!(Stack: ips));
        check(
            &btf,
            "mp_stats",
            size_of::<Stats>(),
            fields!(Stats: samples, dropped, ring_full, t_n, t_sum, t_sumsq, t_min, t_max, stack_lost),
        );
    }

    /// The off-CPU path's structs (mantle_abi::offcpu) against
    /// offcpu.bpf.o's BTF.
    #[test]
    fn off_cpu_rust_matches_bpf_object() {
        use mantle_abi::offcpu::{OffCtl, OffKey, OffStats, OffVal};
        let btf = Btf::from_path(concat!(env!("OUT_DIR"), "/offcpu.bpf.o"))
            .expect("read BTF of offcpu.bpf.o");
        check(
            &btf,
            "mo_key",
            size_of::<OffKey>(),
            fields!(OffKey: pid, tid, kstack, ustack),
        );
        check(
            &btf,
            "mo_val",
            size_of::<OffVal>(),
            fields!(OffVal: ns, blocks),
        );
        check(
            &btf,
            "mo_stats",
            size_of::<OffStats>(),
            fields!(OffStats: switch_out, switch_in, dropped, start_lost, stack_lost, dropped_ns),
        );
        check(
            &btf,
            "mo_ctl",
            size_of::<OffCtl>(),
            fields!(OffCtl: since_ns),
        );
    }
}

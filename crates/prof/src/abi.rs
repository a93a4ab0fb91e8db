//! The profiler's shared layouts live in the ABI crate
//! ([`mantle_abi::prof`], mirrors of `src/bpf/prof.h`); this module
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
}

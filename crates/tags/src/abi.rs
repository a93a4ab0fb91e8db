//! The tags subsystem's shared layouts live in the ABI crate
//! ([`mantle_abi::tags`], mirrors of `src/bpf/tags.h`); this module
//! re-exports them under their old path and holds the `layout` test, which
//! needs this crate's compiled eBPF object: every shared struct's size and
//! field offsets in Rust equal those the eBPF compiler laid out (read from
//! the object's BTF). Enum values and #defines need no such test: the
//! Rust constants are generated from the header's lines (crates/abi
//! build.rs), and clang emits no BTF for enums used only as values.

pub use mantle_abi::cstr;
pub use mantle_abi::tags::*;

/// The layout test: every shared struct's size and field offsets, in Rust,
/// equal those the eBPF compiler laid out (read from the object's BTF).
#[cfg(all(test, feature = "loader"))]
mod layout {
    use libbpf_rs::btf::Btf;
    use mantle_abi::tags::*;
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
            fields!(Admin: code, tag, flags, ll_base, ll_size, digest, created_ns, default_ttl, pad, owner_uid, name),
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
            "mt_stats",
            size_of::<Stats>(),
            fields!(Stats: hops, rejected, deposit_fail, late, no_view, opt_written, opt_parsed, opt_mismatch, opt_nospace),
        );
        check(
            &btf,
            "mt_thread_rec",
            size_of::<ThreadRec>(),
            fields!(ThreadRec: tid, pid, err, flags, vec, term, ttl, comm),
        );
    }
}

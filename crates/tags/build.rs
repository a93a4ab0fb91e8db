//! Builds the tags eBPF object and its libbpf-rs skeleton (crates/bpf-build
//! chooses the architecture, the vmlinux.h and the clang arguments), and the
//! hooks' floor (empty programs on the same hooks, for bench/tags and
//! `mantle-tags-floor`). Only with the `loader` feature: the applications'
//! library (crates/api) uses this crate without it and needs no eBPF object,
//! nor clang. The shared constants of tags.h become Rust in crates/abi's
//! build script.
fn main() {
    if std::env::var_os("CARGO_FEATURE_LOADER").is_none() {
        return;
    }
    mantle_bpf_build::Bpf::new("src/bpf/tags.bpf.c")
        .include("src/bpf")
        .build();
    mantle_bpf_build::Bpf::new("src/bpf/floor.bpf.c").build();
}

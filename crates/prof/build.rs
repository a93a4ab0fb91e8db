//! Builds the profiler's eBPF sample path and its libbpf-rs skeleton
//! (crates/bpf-build chooses the architecture, the vmlinux.h and the clang
//! arguments). The tag vector width comes from the tags subsystem's header
//! (crates/tags/src/bpf/tags.h), so that directory is on the include path.
fn main() {
    mantle_bpf_build::Bpf::new("src/bpf/prof.bpf.c")
        .include("src/bpf")
        .include("../tags/src/bpf")
        .build();
}

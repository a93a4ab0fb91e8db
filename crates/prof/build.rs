//! Builds the profiler's eBPF programs and their libbpf-rs skeletons
//! (crates/bpf-build chooses the architecture, the vmlinux.h and the clang
//! arguments): the sample path (prof.bpf.c) and the off-CPU path
//! (offcpu.bpf.c, `record --off-cpu`). The tag vector width comes from the
//! tags subsystem's header (crates/tags/src/bpf/tags.h), so that directory
//! is on the include path.
fn main() {
    mantle_bpf_build::Bpf::new("src/bpf/prof.bpf.c")
        .include("src/bpf")
        .include("../tags/src/bpf")
        .build();
    mantle_bpf_build::Bpf::new("src/bpf/offcpu.bpf.c")
        .include("src/bpf")
        .include("../tags/src/bpf")
        .build();
}

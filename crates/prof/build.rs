//! Builds the profiler's eBPF sample path and its libbpf-rs skeleton.
//!
//! vmlinux.h is generated into OUT_DIR from the running kernel's BTF
//! (bpftool), so nothing generated lives in the source tree. The tag vector
//! width comes from the tags subsystem's header (crates/tags/src/bpf/tags.h),
//! honouring MANTLE_MT_TAGS like the tags crate does.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let bpf_dir = manifest.join("src/bpf");
    let tags_dir = manifest.join("../tags/src/bpf");
    let vmlinux = out_dir.join("vmlinux.h");
    if !vmlinux.exists() {
        let out = Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "c",
            ])
            .output()
            .expect(
                "failed to run bpftool (apt-get install bpftool): needed to generate vmlinux.h",
            );
        assert!(
            out.status.success(),
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&vmlinux, out.stdout).expect("write vmlinux.h");
    }
    let mut clang_args = vec![
        "-mcpu=v3".to_string(),
        "-g".to_string(),
        "-O2".to_string(),
        "-D__TARGET_ARCH_x86".to_string(),
        format!("-I{}", out_dir.display()),
        format!("-I{}", bpf_dir.display()),
        format!("-I{}", tags_dir.display()),
    ];
    if let Ok(tags) = std::env::var("MANTLE_MT_TAGS") {
        clang_args.push(format!("-DMT_TAGS={tags}"));
    }
    libbpf_cargo::SkeletonBuilder::new()
        .source(bpf_dir.join("prof.bpf.c"))
        .obj(out_dir.join("prof.bpf.o"))
        .clang_args(clang_args)
        .build_and_generate(out_dir.join("prof.skel.rs"))
        .expect("failed to build prof.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/prof.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/prof.h");
    println!("cargo:rerun-if-changed=../tags/src/bpf/tags.h");
    println!("cargo:rerun-if-env-changed=MANTLE_MT_TAGS");
}

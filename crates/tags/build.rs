//! Builds the tags eBPF object and its libbpf-rs skeleton.
//!
//! vmlinux.h is generated from the running kernel's BTF (bpftool) so that a
//! fresh machine builds without a checked-in header; CO-RE relocations make
//! the object portable to other kernels with BTF.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let bpf_dir = manifest.join("src/bpf");
    let vmlinux = bpf_dir.join("vmlinux.h");
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
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let out = out_dir.join("tags.skel.rs");
    // The shared constants come from the one header both halves use.
    let header = std::fs::read_to_string(bpf_dir.join("tags.h")).expect("read tags.h");
    let define = |name: &str| -> String {
        header
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some("#define") && f.next() == Some(name))
                    .then(|| f.next().unwrap().to_string())
            })
            .unwrap_or_else(|| panic!("tags.h has no #define {name}"))
    };
    let mt_tags = std::env::var("MANTLE_MT_TAGS").unwrap_or_else(|_| define("MT_TAGS"));
    let mut consts = format!(
        "/// Bits in a tag vector (tags.h MT_TAGS).\npub const MT_TAGS: usize = {mt_tags};\n"
    );
    for name in [
        "MT_NAME_LEN",
        "MT_TTL_INF",
        "MT_LIFELINE_SLOTS",
        "MT_COMM_LEN",
        "MT_GLOBAL_BITS",
    ] {
        consts += &format!(
            "/// tags.h {name}\npub const {name}: usize = {};\n",
            define(name)
        );
    }
    std::fs::write(out_dir.join("consts.rs"), consts).expect("write consts.rs");
    let mut clang_args = vec![
        "-mcpu=v3".to_string(),
        "-g".to_string(),
        "-O2".to_string(),
        "-D__TARGET_ARCH_x86".to_string(),
        format!("-I{}", bpf_dir.display()),
    ];
    if let Ok(tags) = std::env::var("MANTLE_MT_TAGS") {
        clang_args.push(format!("-DMT_TAGS={tags}"));
    }
    libbpf_cargo::SkeletonBuilder::new()
        .source(bpf_dir.join("tags.bpf.c"))
        .obj(out_dir.join("tags.bpf.o"))
        .clang_args(clang_args)
        .build_and_generate(&out)
        .expect("failed to build tags.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/tags.bpf.c");
    println!("cargo:rerun-if-changed=src/bpf/tags.h");
    println!("cargo:rerun-if-changed=src/bpf/ctz64.h");
    println!("cargo:rerun-if-env-changed=MANTLE_MT_TAGS");
}

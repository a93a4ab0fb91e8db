//! Builds the application kernel's preloaded library,
//! `libmantle-offload.so`, from `lib/offload.c` with the system's `cc`,
//! the way crates/exec builds the fast path's stub, into `$OUT_DIR`; its
//! path reaches the crate as `MANTLE_OFFLOAD_LIB_BUILT` (overridden at
//! run time by `MANTLE_OFFLOAD_LIB`). The placement table the library
//! consults (`placement.h`) is generated first from `src/placement.rs`,
//! the one definition of the policy.
use std::path::PathBuf;
use std::process::Command;

#[path = "src/placement.rs"]
#[allow(dead_code)]
mod placement;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // site rewriting and the signal emulation are shared with the fast
    // path's stub (crates/exec/stub): one C source for both builds
    let shared = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("../exec/stub");
    for f in ["lib/offload.c", "lib/offload.h", "src/placement.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    for f in ["site.h", "sigemu.h"] {
        println!("cargo:rerun-if-changed={}", shared.join(f).display());
    }
    std::fs::write(out.join("placement.h"), placement::c_header()).expect("write placement.h");
    let so = out.join("libmantle-offload.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            // the trap handler and the bootstrap threads must not touch
            // vector state behind the program's back, nor a canary in TLS
            // that a bootstrap thread does not own
            "-mgeneral-regs-only",
            "-fno-stack-protector",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(&out)
        .arg("-I")
        .arg(&shared)
        .arg("-o")
        .arg(&so)
        .arg("lib/offload.c")
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("running {cc} for the offload library: {e}"));
    assert!(st.success(), "{cc} failed to build lib/offload.c");
    println!("cargo:rustc-env=MANTLE_OFFLOAD_LIB_BUILT={}", so.display());
}

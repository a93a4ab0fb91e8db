//! Builds the fast path's guest stub, `libmantle-stub.so`, from
//! `stub/stub.c` (plain C, libc only in its constructor) with the system's
//! `cc`, into `$OUT_DIR`; its path reaches the crate as
//! `MANTLE_STUB_BUILT` (overridden at run time by `MANTLE_STUB`).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let so = out.join("libmantle-stub.so");
    for f in ["stub/stub.c", "stub/fast.h", "stub/site.h", "stub/sigemu.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-mgeneral-regs-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&so)
        .arg("stub/stub.c")
        .status()
        .unwrap_or_else(|e| panic!("running {cc} for the fast-path stub: {e}"));
    assert!(st.success(), "{cc} failed to build stub/stub.c");
    println!("cargo:rustc-env=MANTLE_STUB_BUILT={}", so.display());
}

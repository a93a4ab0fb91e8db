//! The kernel side's ctz64() (src/bpf/ctz64.h, included by tags.bpf.c) on
//! the host: src/bpf/test_ctz64.c compiles that same header with `cc` and
//! checks it against the compiler's builtin over every bit position and a
//! million pseudo-random words. A wrong de Bruijn constant (issue 8, item 8)
//! delivered requests as the wrong tag; this finds such a mistake without
//! loading anything into the kernel.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn ctz64_matches_the_builtin_on_every_bit_and_random_words() {
    let bpf = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/bpf");
    let dir = std::env::temp_dir().join(format!("mantle-ctz64-test.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let exe = dir.join("test_ctz64");
    mantle_testsupport::build::run_cc(
        "test_ctz64.c",
        Command::new("cc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror"])
            .arg(format!("-I{}", bpf.display()))
            .arg("-o")
            .arg(&exe)
            .arg(bpf.join("test_ctz64.c")),
    );
    let run = Command::new(&exe).output().expect("run test_ctz64");
    let _ = std::fs::remove_dir_all(&dir);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "ctz64 gave wrong answers:\n{out}");
    // The summary line proves the checks ran (a binary that exits 0
    // without checking would not print it).
    assert!(
        out.contains("words checked, 0 wrong"),
        "unexpected output of test_ctz64:\n{out}"
    );
}

//! `mantle instr plan --from-prof`: a program with one hot and one cold
//! function is profiled by `mantle prof record` (root, perf events, eBPF:
//! ignored unless included, like crates/prof's recording tests), and the
//! plan must choose the hot one and not the cold one. The selection core
//! (`select::hottest`) is unit-tested in crates/instr; this checks the
//! session is read and the program's image found.

use mantle_testsupport::build::run_cc;
use mantle_testsupport::cli::mantle_code;
use std::process::Command;

const PROG: &str = r#"
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) long hot(long n) { long s = 0; for (long i = 0; i < n; i++) s += i * i ^ (s >> 3); return s; }
__attribute__((noinline)) long cold(long n) { return n * 2; }
int main(void) { for (int i = 0; i < 40; i++) sink += hot(10000000) + cold(i); return 0; }
"#;

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn from_prof_chooses_the_hot_function() {
    mantle_testsupport::require_root("recording (perf events and eBPF)");
    let _lock = mantle_testsupport::lock::take_kernel_lock().unwrap();
    let d = std::env::temp_dir().join(format!("mantle-instr-prof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let src = d.join("p.c");
    std::fs::write(&src, PROG).unwrap();
    let (obj, exe) = (d.join("p.o"), d.join("p"));
    run_cc(
        "p.o",
        Command::new("cc")
            .args(["-O2", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj),
    );
    run_cc("p", Command::new("cc").arg(&obj).arg("-o").arg(&exe));
    let session = d.join("s.prof");
    let (s, e, o) = (
        session.to_str().unwrap(),
        exe.to_str().unwrap(),
        obj.to_str().unwrap(),
    );
    mantle_code(
        0,
        &[
            "prof", "record", "-q", "-F", "5000", "--stacks", "none", "-o", s, "--", e,
        ],
    );
    let out = mantle_code(
        0,
        &[
            "instr",
            "plan",
            o,
            "--from-prof",
            s,
            "--share",
            "80",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hot"], "{}", out.stderr);
    assert!(out.stderr.contains("1 functions make up"), "{}", out.stderr);
    // A share outside (0, 100] is a usage error (exit 2), said clearly.
    let bad = mantle_code(2, &["instr", "plan", o, "--from-prof", s, "--share", "0"]);
    assert!(bad.stderr.contains("not a percentage"), "{}", bad.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

//! Linked files (docs/instr.md "Linked executables and shared
//! libraries"): fixtures from tests/c (and small libraries written here)
//! are linked as PIE, non-PIE and shared libraries, the linked files are
//! rewritten with every function chosen, and the rewritten programs run
//! with no LD_PRELOAD or library path: same output, same exit status, and
//! the tracer's call counts equal the counts the programs keep.

mod common;

use mantle_instr::linked;
use mantle_instr::{ExitMode, Outcome, Refusal, Report, Selection};
use mantle_testsupport::build::{run_cc, workspace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

fn profile() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// Builds a package of this workspace in this test's profile.
fn cargo_build(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build").args(args).current_dir(workspace());
    if !profile().ends_with("debug") {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success(), "cargo build {args:?}");
}

/// libmantle_instr_rt.so of this profile, by absolute path (the DT_NEEDED).
fn runtime_so() -> String {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| cargo_build(&["-p", "mantle-instr-rt", "--lib"]));
    let p = profile()
        .join("libmantle_instr_rt.so")
        .canonicalize()
        .unwrap();
    p.to_str().unwrap().to_string()
}

fn tmpdir(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Under one scratch directory, removed when the test binary exits
    // (and by a later run if this one was killed).
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| mantle_testsupport::scratch::dir("instr-linked"));
    let d = root.join(format!("{n}-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const C_FLAGS: &[&str] = &[
    "-O2",
    "-fno-inline",
    "-fno-ipa-cp",
    "-fno-ipa-sra",
    "-fno-partial-inlining",
];

/// `cc flags... -o out`, in `dir`.
fn cc(dir: &Path, cc: &str, args: &[&str], out: &str) -> PathBuf {
    let exe = dir.join(out);
    run_cc(
        out,
        Command::new(cc)
            .args(args)
            .arg("-I")
            .arg(c_dir())
            .arg("-o")
            .arg(&exe)
            .current_dir(dir),
    );
    exe
}

/// Rewrites `input` into `output` (mode kept) with every function chosen,
/// ids from `first`; returns the report.
fn rewrite(input: &Path, output: &Path, first: u32, mode: ExitMode) -> Report {
    let data = std::fs::read(input).unwrap();
    let name = input.file_name().unwrap().to_str().unwrap();
    let (bytes, r) =
        linked::rewrite_file(&data, name, &Selection::all(), first, mode, &runtime_so())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    std::fs::write(output, bytes).unwrap();
    let mode = std::fs::metadata(input).unwrap().permissions();
    std::fs::set_permissions(output, mode).unwrap();
    r
}

struct Run {
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn run(exe: &Path, env: &[(&str, &Path)]) -> Run {
    let mut c = Command::new(exe);
    c.env_remove("LD_PRELOAD").env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    c.current_dir(exe.parent().unwrap());
    let o = c.output().unwrap();
    Run {
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        code: o.status.code(),
    }
}

/// The "count NAME N" lines a fixture prints.
fn own_counts(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("count "))
        .filter_map(|l| {
            let (n, c) = l.split_once(' ')?;
            Some((n.to_string(), c.parse().ok()?))
        })
        .collect()
}

/// Calls by function name in the tracer's profile.
fn traced(prof: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(prof).unwrap_or_else(|e| panic!("{}: {e}", prof.display()));
    common::profile_json(&text)
        .into_iter()
        .map(|(_, name, calls)| (name, calls))
        .collect()
}

fn outcome<'r>(r: &'r Report, name: &str) -> &'r Outcome {
    &r.functions
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} not in {:#?}", r.functions))
        .outcome
}

/// A linked C program's own functions are all instrumented; what is
/// refused belongs to the C runtime (crt1.o, crti.o, crtstuff.c: reserved
/// names, the entry point, size-less helpers).
fn only_crt_refused(r: &Report) {
    const CRT: &[&str] = &["deregister_tm_clones", "register_tm_clones", "frame_dummy"];
    for f in &r.functions {
        if let Outcome::Refused { reason } = &f.outcome {
            assert!(
                f.name.starts_with('_') || CRT.contains(&f.name.as_str()),
                "{}: {reason}",
                f.name
            );
        }
    }
}

/// Builds `src` as `kind` ("pie", "no-pie"), rewrites it in `mode`, runs
/// both; output, status and every count must match.
fn check_program(src: &str, kind: &str, mode: ExitMode) -> Report {
    let dir = tmpdir(&format!("{src}-{kind}"));
    let mut args = C_FLAGS.to_vec();
    let path = c_dir().join(src);
    args.push(path.to_str().unwrap());
    args.extend([if kind == "pie" { "-pie" } else { "-no-pie" }, "-lpthread"]);
    if kind == "pie" {
        args.push("-fpie");
    }
    let orig = cc(&dir, "cc", &args, "orig");
    let new = dir.join("instr");
    let r = rewrite(&orig, &new, 0, mode);
    only_crt_refused(&r);
    assert!(
        matches!(
            outcome(&r, "_start"),
            Outcome::Refused {
                reason: Refusal::ProgramEntry
            }
        ),
        "_start"
    );
    let map = dir.join("map.tsv");
    std::fs::write(&map, r.map_lines()).unwrap();
    let prof = dir.join("prof.json");
    let a = run(&orig, &[]);
    let n = run(
        &new,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    assert_eq!(a.stdout, n.stdout, "{src} {kind} {mode:?}: {}", n.stderr);
    assert_eq!(a.code, n.code, "{src} {kind} {mode:?}: {}", n.stderr);
    let own = own_counts(&a.stdout);
    assert!(!own.is_empty(), "{src}: counts nothing");
    let calls = traced(&prof);
    for (f, c) in &own {
        assert_eq!(
            calls.get(f),
            Some(c),
            "{src} {kind} {mode:?}: calls of {f}: tracer {calls:?} program {own:?}"
        );
    }
    r
}

/// Functions whose exit keeps calls and returns paired (anything but a
/// return frame: patched rets, or whatever the object rewriter offers).
fn paired(r: &Report) -> usize {
    r.functions
        .iter()
        .filter(
            |f| matches!(f.outcome, Outcome::Instrumented { exit, .. } if exit != "return-frame"),
        )
        .count()
}

/// Recursion, varargs, 9 and 15 arguments, function pointers, tail
/// calls; setjmp/longjmp; threads: PIE and non-PIE, both exit designs.
#[test]
fn programs_pie_and_non_pie_both_exit_designs() {
    for src in ["basic.c", "jmp.c", "threads.c"] {
        for kind in ["pie", "no-pie"] {
            let r = check_program(src, kind, ExitMode::ReturnFrames);
            assert_eq!(paired(&r), 0);
            let r = check_program(src, kind, ExitMode::Auto);
            assert!(paired(&r) > 0, "{src} {kind}: every exit a return frame");
        }
    }
}

/// The library's source: counts its own calls, exports `lib_report`.
const LIB_C: &str = r#"
#include "count.h"
COUNTER(lib_fib); COUNTER(lib_sum); COUNTER(lib_apply);
__attribute__((optimize("no-optimize-sibling-calls")))
long lib_fib(long n) { CNT(lib_fib); return n < 2 ? n : lib_fib(n - 1) + lib_fib(n - 2); }
long lib_sum(const long *v, int n) { CNT(lib_sum); long s = 0; for (int i = 0; i < n; i++) s += v[i] * (i + 1); return s; }
long lib_apply(long (*f)(long), long x) { CNT(lib_apply); return f(x) + 1; }
void lib_report(void) { REPORT(lib_fib); REPORT(lib_sum); REPORT(lib_apply); }
"#;

/// A program that uses the library, linked against it or dlopen()ing it.
const MAIN_C: &str = r#"
#include "count.h"
#include <dlfcn.h>
#include <stdlib.h>
COUNTER(twice); COUNTER(main);
long twice(long x) { CNT(twice); return 2 * x; }
int main(int argc, char **argv) {
  CNT(main);
#ifdef DL
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  long (*lib_fib)(long) = (long (*)(long))dlsym(h, "lib_fib");
  long (*lib_sum)(const long *, int) = (long (*)(const long *, int))dlsym(h, "lib_sum");
  long (*lib_apply)(long (*)(long), long) = (long (*)(long (*)(long), long))dlsym(h, "lib_apply");
  void (*lib_report)(void) = (void (*)(void))dlsym(h, "lib_report");
#else
  long lib_fib(long); long lib_sum(const long *, int); long lib_apply(long (*)(long), long);
  void lib_report(void);
#endif
  long v[50]; for (int i = 0; i < 50; i++) v[i] = i * argc;
  long acc = 0;
  for (int i = 0; i < 40; i++) acc += lib_sum(v, i) + lib_apply(twice, i);
  printf("%ld %ld\n", lib_fib(16), acc);
  lib_report(); REPORT(twice); REPORT(main);
  return 3;
}
"#;

/// A shared library and a program linked with it, both rewritten (ids
/// continue across them, one map); and the same library dlopen()ed by an
/// unrewritten program: the loader binds its slots as it loads it.
#[test]
fn shared_library_linked_and_dlopened() {
    let dir = tmpdir("shlib");
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    std::fs::write(dir.join("main.c"), MAIN_C).unwrap();
    let mut lib_args = C_FLAGS.to_vec();
    lib_args.extend(["-fPIC", "-shared", "lib.c"]);
    let lib = cc(&dir, "cc", &lib_args, "libdemo.so");
    let mut main_args = C_FLAGS.to_vec();
    main_args.extend(["main.c", "-L.", "-ldemo", "-Wl,-rpath,$ORIGIN"]);
    let main = cc(&dir, "cc", &main_args, "main");
    let mut dl_args = C_FLAGS.to_vec();
    dl_args.extend(["-DDL", "main.c", "-ldl"]);
    let dl = cc(&dir, "cc", &dl_args, "dlmain");

    let orig_out = run(&main, &[]);
    assert_eq!(orig_out.code, Some(3), "{}", orig_out.stderr);
    // Rewrite both: the library in place of the original (the program
    // finds it by its rpath), the program beside.
    let keep = dir.join("libdemo.orig.so");
    std::fs::rename(&lib, &keep).unwrap();
    let rl = rewrite(&keep, &lib, 0, ExitMode::Auto);
    only_crt_refused(&rl);
    for f in ["lib_fib", "lib_sum", "lib_apply"] {
        assert!(
            matches!(outcome(&rl, f), Outcome::Instrumented { .. }),
            "{f}"
        );
    }
    let main_new = dir.join("main.instr");
    let rm = rewrite(&main, &main_new, rl.instrumented as u32, ExitMode::Auto);
    only_crt_refused(&rm);
    let map = dir.join("map.tsv");
    std::fs::write(&map, rl.map_lines() + &rm.map_lines()).unwrap();
    let prof = dir.join("prof.json");
    let n = run(
        &main_new,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    assert_eq!(
        (&orig_out.stdout, orig_out.code),
        (&n.stdout, n.code),
        "{}",
        n.stderr
    );
    let own = own_counts(&orig_out.stdout);
    assert_eq!(own.len(), 5);
    let calls = traced(&prof);
    for (f, c) in &own {
        assert_eq!(calls.get(f), Some(c), "{f}: {calls:?} {own:?}");
    }

    // dlopen: the rewritten library, by path, from a program that knows
    // nothing of mantle.
    std::fs::remove_file(&prof).ok();
    let lib_s = lib.to_str().unwrap();
    let keep_s = keep.to_str().unwrap();
    let a = Command::new(&dl).arg(keep_s).output().unwrap();
    let dl_run = |tunables: Option<&str>| {
        let mut c = Command::new(&dl);
        c.arg(lib_s)
            .env("MANTLE_INSTR_OUT", &prof)
            .env("MANTLE_INSTR_MAP", &map);
        if let Some(t) = tunables {
            c.env("GLIBC_TUNABLES", t);
        }
        c.output().unwrap()
    };
    let mut n = dl_run(None);
    if String::from_utf8_lossy(&n.stdout).contains("static TLS") {
        // A runtime with initial-exec TLS needs static TLS room when the
        // loader meets it only at dlopen() (docs/instr.md): give it some.
        eprintln!("the runtime needs static TLS: dlopen() with more reserved");
        n = dl_run(Some("glibc.rtld.optional_static_tls=1048576"));
    }
    assert_eq!(a.stdout, n.stdout, "{}", String::from_utf8_lossy(&n.stderr));
    assert_eq!(a.status.code(), n.status.code());
    let own = own_counts(&String::from_utf8_lossy(&a.stdout));
    let calls = traced(&prof);
    for f in ["lib_fib", "lib_sum", "lib_apply"] {
        assert_eq!(calls.get(f), own.get(f), "{f}: {calls:?} {own:?}");
    }
}

/// A C++ exception thrown through an instrumented frame (a trampoline,
/// the default exit) of a linked program, which loads the runtime's
/// unwinder entry points (libmantle-instr's unwind.rs).
#[test]
fn cxx_exception_through_instrumented_frames() {
    let dir = tmpdir("cxx");
    let mut args = C_FLAGS.to_vec();
    let src = c_dir().join("cxx.cpp");
    args.push(src.to_str().unwrap());
    let orig = cc(&dir, "c++", &args, "orig");
    let new = dir.join("instr");
    let r = rewrite(&orig, &new, 0, ExitMode::Auto);
    assert!(
        matches!(
            outcome(&r, "_Z6middlei"),
            Outcome::Instrumented {
                exit: "trampoline",
                ..
            }
        ),
        "{:#?}",
        r.functions
    );
    let map = dir.join("map.tsv");
    std::fs::write(&map, r.map_lines()).unwrap();
    let prof = dir.join("prof.json");
    let a = run(&orig, &[]);
    let n = run(
        &new,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "{}", n.stderr);
    let own = own_counts(&a.stdout);
    let calls = traced(&prof);
    assert_eq!(
        calls.get("_Z6middlei"),
        own.get("middle"),
        "{calls:?} {own:?}"
    );
}

/// Unsafe sites of a linked program are refused for the same reasons as
/// in an object, and the program still runs as before.
#[test]
fn unsafe_sites_are_refused_with_their_reason() {
    let dir = tmpdir("unsafe");
    let src = c_dir().join("unsafe.c");
    let orig = cc(
        &dir,
        "cc",
        &["-O2", "-fno-inline", src.to_str().unwrap()],
        "orig",
    );
    let new = dir.join("instr");
    let r = rewrite(&orig, &new, 0, ExitMode::ReturnFrames);
    let reason = |f: &str| match outcome(&r, f) {
        Outcome::Refused { reason } => Some(reason.clone()),
        Outcome::Instrumented { .. } => None,
    };
    assert!(
        matches!(reason("loop_in"), Some(Refusal::BranchTarget { offset: 2 })),
        "{:?}",
        reason("loop_in")
    );
    assert!(
        matches!(reason("tiny"), Some(Refusal::TooShort { need: 11, .. })),
        "{:?}",
        reason("tiny")
    );
    assert!(
        matches!(reason("realign"), Some(Refusal::Unrelocatable { .. })),
        "{:?}",
        reason("realign")
    );
    assert!(
        matches!(
            reason("loop_entry"),
            Some(Refusal::BranchTarget { offset: 0 })
        ),
        "{:?}",
        reason("loop_entry")
    );
    assert!(
        matches!(reason("where"), Some(Refusal::ReadsReturnAddress { .. })),
        "{:?}",
        reason("where")
    );
    assert_eq!(reason("_start"), Some(Refusal::ProgramEntry));
    for f in ["uses_r11", "early", "plain", "main"] {
        assert_eq!(reason(f), None, "{f}");
    }
    let (a, n) = (run(&orig, &[]), run(&new, &[]));
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "{}", n.stderr);
}

/// `-fcf-protection`: every site after `endbr64`, and the IBT/SHSTK
/// property cleared in the rewritten program (readelf shows none).
#[test]
fn cet_marked_program() {
    let dir = tmpdir("cet");
    let mut args = C_FLAGS.to_vec();
    let src = c_dir().join("basic.c");
    // The linker marks the program only if every object is; Debian's crt
    // files are not, so the marking is asked for.
    args.extend([
        src.to_str().unwrap(),
        "-fcf-protection=full",
        "-Wl,-z,ibt,-z,shstk",
    ]);
    let orig = cc(&dir, "cc", &args, "orig");
    let notes = |p: &Path| {
        let o = Command::new("readelf").arg("-n").arg(p).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(notes(&orig).contains("IBT"), "{}", notes(&orig));
    let new = dir.join("instr");
    // Return frames break a shadow stack's pairing: the property goes.
    // Other designs may keep it; the file says what the report says.
    for mode in [ExitMode::ReturnFrames, ExitMode::Auto] {
        let r = rewrite(&orig, &new, 0, mode);
        assert!(r.cet_cleared || mode == ExitMode::Auto, "{mode:?}");
        assert!(matches!(
            outcome(&r, "fib"),
            Outcome::Instrumented { endbr64: true, .. }
        ));
        assert_eq!(
            !notes(&new).contains("IBT"),
            r.cet_cleared,
            "{}",
            notes(&new)
        );
        let (a, n) = (run(&orig, &[]), run(&new, &[]));
        assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "{}", n.stderr);
    }
}

/// Not x86-64, not ELF, static, truncated or corrupted: an error, never a
/// panic (MANTLE_INSTR_FUZZ_ITERS corrupts longer).
#[test]
fn bad_linked_files_are_errors() {
    let dir = tmpdir("bad");
    let mut args = C_FLAGS.to_vec();
    let src = c_dir().join("basic.c");
    args.push(src.to_str().unwrap());
    let good = std::fs::read(cc(&dir, "cc", &args, "good")).unwrap();
    let sel = Selection::all();
    let rt = runtime_so();
    let rw = |d: &[u8]| linked::rewrite_file(d, "x", &sel, 0, ExitMode::Auto, &rt);
    assert!(rw(&good).is_ok());
    let mut arm = good.clone();
    arm[18] = 183; // e_machine = EM_AARCH64
    let e = rw(&arm).unwrap_err();
    assert!(e.to_string().contains("not x86-64"), "{e}");
    let mut class32 = good.clone();
    class32[4] = 1;
    assert!(matches!(
        rw(&class32),
        Err(mantle_instr::Error::Unsupported(_))
    ));
    assert!(rw(b"#!/bin/sh\n").is_err());
    assert!(rw(&[]).is_err());
    assert!(linked::rewrite_file(&good, "x", &sel, 0, ExitMode::Auto, "a\0b").is_err());
    // The object entry point sends linked files here too.
    let r = mantle_instr::plan_file(&good, "x", &sel, 0, ExitMode::Auto).unwrap();
    assert!(r.instrumented > 0);

    // A static executable, PIE or not, has no loader to bring the runtime.
    for flag in ["-static", "-static-pie"] {
        let mut st = args.clone();
        st.push(flag);
        let out = Command::new("cc")
            .args(&st)
            .arg("-I")
            .arg(c_dir())
            .arg("-o")
            .arg(dir.join("static"))
            .output()
            .unwrap();
        if !out.status.success() {
            assert!(
                !mantle_testsupport::ci(),
                "cc {flag}: no static libc (libc6-dev)"
            );
            eprintln!("cc {flag} failed: the static case is not checked");
            continue;
        }
        let e = rw(&std::fs::read(dir.join("static")).unwrap()).unwrap_err();
        assert!(e.to_string().contains("static executable"), "{flag}: {e}");
    }

    // Every truncation length of the headers' region, then the whole file
    // cut at every 97th byte, and random corruptions.
    for len in (0..good.len().min(4096)).chain((4096..good.len()).step_by(97)) {
        let _ = rw(&good[..len]);
    }
    // The corpus: this PIE, the same program non-PIE, a shared library
    // with a DT_HASH table (each takes its own paths through the tables).
    let mut np = args.clone();
    np.push("-no-pie");
    std::fs::write(dir.join("lib.c"), LIB_C).unwrap();
    let mut lib = C_FLAGS.to_vec();
    lib.extend(["-fPIC", "-shared", "-Wl,--hash-style=both", "lib.c"]);
    let corpus = [
        good.clone(),
        std::fs::read(cc(&dir, "cc", &np, "nopie")).unwrap(),
        std::fs::read(cc(&dir, "cc", &lib, "lib.so")).unwrap(),
    ];
    for c in &corpus {
        assert!(rw(c).is_ok());
    }
    let mut x: u64 = 0x2545f4914f6cdd1d;
    let iters = std::env::var("MANTLE_INSTR_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500u64);
    for i in 0..iters {
        let mut d = corpus[(i / 2 % 3) as usize].clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Half the corruptions in the headers and tables (first 4 KiB
            // and the section headers at the end), half anywhere.
            let i = if i % 2 == 0 {
                let hot = 4096.min(d.len());
                if x & 1 == 0 {
                    (x as usize >> 1) % hot
                } else {
                    d.len() - 1 - (x as usize >> 1) % hot
                }
            } else {
                (x as usize) % d.len()
            };
            d[i] = (x >> 32) as u8;
        }
        let _ = rw(&d);
    }
}

/// A call among the overwritten instructions is refused: the callee's
/// frame would overwrite the stub's parked resume address (found on
/// Debian's libsqlite3, whose sqlite3MallocZero hung before the fix).
#[test]
fn call_in_patched_bytes_is_refused() {
    let dir = tmpdir("call");
    std::fs::write(
        dir.join("call.c"),
        r#"#include <stdio.h>
__attribute__((noinline)) long helper(long x) { __asm__ volatile(""); return x * 3; }
__asm__(".text\n.globl calls_early\n.type calls_early,@function\ncalls_early:\n"
        "  push %rbx\n  mov %rdi, %rbx\n  call helper\n  add %rbx, %rax\n  pop %rbx\n  ret\n"
        ".size calls_early, .-calls_early\n");
long calls_early(long);
int main(void) { printf("%ld\n", calls_early(5)); return 0; }
"#,
    )
    .unwrap();
    let orig = cc(&dir, "cc", &["-O2", "call.c"], "orig");
    let new = dir.join("instr");
    // With stubs that park the resume address (return frames): refused.
    // Another exit design may take it; the program must run the same.
    for mode in [ExitMode::ReturnFrames, ExitMode::Auto] {
        let r = rewrite(&orig, &new, 0, mode);
        match outcome(&r, "calls_early") {
            Outcome::Refused {
                reason: Refusal::Unrelocatable { why, .. },
            } => assert!(why.contains("calls a function"), "{why}"),
            Outcome::Instrumented { exit, .. } if mode == ExitMode::Auto => {
                assert!(*exit != "return-frame", "{exit}")
            }
            o => panic!("calls_early {mode:?}: {o:?}"),
        }
        let (a, n) = (run(&orig, &[]), run(&new, &[]));
        assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "{}", n.stderr);
    }
}

/// A shared library nobody here wrote: Debian's libsqlite3 (scripts/
/// setup.sh installs sqlite3), every function chosen, under the sqlite3
/// shell on a deterministic workload: the same output; and both exit
/// designs count the same calls.
#[test]
fn debian_libsqlite3() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0");
    let have = lib.exists() && mantle_testsupport::have_program("sqlite3");
    if !have {
        assert!(
            !mantle_testsupport::ci(),
            "sqlite3 and libsqlite3 are missing (scripts/setup.sh installs them)"
        );
        eprintln!("ignored: sqlite3 or {} missing", lib.display());
        return;
    }
    let sql = "create table t(a integer primary key, b text);\n\
        with recursive c(x) as (select 1 union all select x+1 from c where x<5000) \
        insert into t select x, hex((x*2654435761) % 1000003) from c;\n\
        select count(*), sum(length(b)), max(a) from t where a % 7 = 3;\n\
        create index ib on t(b);\n\
        select count(*), min(b) from t where b > '7';\n";
    let run_sql = |libdir: Option<&Path>, env: &[(&str, &Path)]| {
        use std::io::Write;
        let mut c = Command::new("sqlite3");
        c.arg(":memory:")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if let Some(d) = libdir {
            c.env("LD_LIBRARY_PATH", d);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let mut ch = c.spawn().unwrap();
        ch.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
        ch.wait_with_output().unwrap()
    };
    let want = run_sql(None, &[]);
    assert!(want.status.success());
    let mut counts = Vec::new();
    for mode in [ExitMode::Auto, ExitMode::ReturnFrames] {
        let dir = tmpdir(&format!("sqlite-{mode:?}"));
        let r = rewrite(lib, &dir.join("libsqlite3.so.0"), 0, mode);
        assert!(r.instrumented > 1000, "{} instrumented", r.instrumented);
        let map = dir.join("map.tsv");
        std::fs::write(&map, r.map_lines()).unwrap();
        let prof = dir.join("prof.json");
        let got = run_sql(
            Some(&dir),
            &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
        );
        assert_eq!(
            String::from_utf8_lossy(&want.stdout),
            String::from_utf8_lossy(&got.stdout),
            "{mode:?}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        assert_eq!(want.status.code(), got.status.code());
        let calls = traced(&prof);
        assert!(
            calls.get("sqlite3_prepare_v2").is_some_and(|&c| c > 0),
            "{calls:?}"
        );
        let instrumented: std::collections::BTreeSet<String> = r
            .functions
            .iter()
            .filter(|f| matches!(f.outcome, Outcome::Instrumented { .. }))
            .map(|f| f.name.clone())
            .collect();
        counts.push((calls, instrumented));
    }
    // Over the functions both designs instrument (their refusals differ).
    let both: Vec<&String> = counts[0].1.intersection(&counts[1].1).collect();
    assert!(both.len() > 1000, "{} in both", both.len());
    for f in both {
        assert_eq!(
            counts[0].0.get(f),
            counts[1].0.get(f),
            "{f}: the exit designs disagree on its calls"
        );
    }
}

/// Nothing chosen can be patched: the output is the input, with no
/// dependency on the runtime.
#[test]
fn nothing_instrumented_is_the_input() {
    let dir = tmpdir("none");
    let src = c_dir().join("basic.c");
    let orig = cc(&dir, "cc", &["-O2", src.to_str().unwrap()], "orig");
    let data = std::fs::read(&orig).unwrap();
    let mut sel = Selection::default();
    sel.add("_start");
    sel.add("no_such_function");
    let (out, r) =
        linked::rewrite_file(&data, "orig", &sel, 0, ExitMode::Auto, &runtime_so()).unwrap();
    assert_eq!(r.instrumented, 0);
    assert_eq!(r.refused, 1);
    assert!(out == data);
}

/// The libraries the runtime uses (libc, libgcc_s, the loader) are
/// refused by name: instrumented, the runtime would re-enter itself.
#[test]
fn runtime_dependencies_are_refused() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    assert!(libc.exists(), "no {}", libc.display());
    let data = std::fs::read(libc).unwrap();
    let e = linked::rewrite_file(
        &data,
        "libc",
        &Selection::all(),
        0,
        ExitMode::Auto,
        &runtime_so(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("libc.so.6 is used by libmantle-instr"),
        "{e}"
    );
    let e =
        mantle_instr::plan_file(&data, "libc", &Selection::all(), 0, ExitMode::Auto).unwrap_err();
    assert!(matches!(e, mantle_instr::Error::Unsupported(_)), "{e}");
}

/// Vector registers across ordinary hooks in a linked program: xmm.c
/// linked with hooks that clobber every caller-saved register
/// (fast_hooks.c -DORDINARY), its own functions rewritten with
/// trampolines: the output is the original's, so every register a caller,
/// argument or result needed was kept (crates/instr/src/vregs.rs, with
/// callers found by address in the linked file).
#[test]
fn vector_registers_across_ordinary_hooks_linked() {
    let dir = tmpdir("xmm-linked");
    let inc = workspace().join("crates/instr-rt/include");
    let mut args = C_FLAGS.to_vec();
    let (xmm, hooks) = (c_dir().join("xmm.c"), c_dir().join("fast_hooks.c"));
    let inc_arg = format!("-I{}", inc.display());
    args.extend([
        xmm.to_str().unwrap(),
        hooks.to_str().unwrap(),
        "-DORDINARY",
        &inc_arg,
        "-pie",
        "-fpie",
    ]);
    let so = runtime_so();
    let so_dir = Path::new(&so)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let libdir = format!("-L{so_dir}");
    let rpath = format!("-Wl,-rpath,{so_dir}");
    args.extend([
        libdir.as_str(),
        rpath.as_str(),
        "-lmantle_instr_rt",
        "-lm",
        "-lpthread",
    ]);
    let orig = cc(&dir, "cc", &args, "orig");
    let mut sel = Selection::default();
    for f in [
        "leaf",
        "leaf2",
        "keeps",
        "keeps_many",
        "use",
        "pass",
        "give",
        "ret_through",
        "out",
        "main",
    ] {
        sel.add_exact(f);
    }
    let data = std::fs::read(&orig).unwrap();
    let (bytes, r) = linked::rewrite_file(&data, "orig", &sel, 0, ExitMode::Auto, &so).unwrap();
    let new = dir.join("instr");
    std::fs::write(&new, bytes).unwrap();
    std::fs::set_permissions(&new, std::fs::metadata(&orig).unwrap().permissions()).unwrap();
    assert_eq!(r.instrumented, 10, "{:?}", r.functions);
    let counts = dir.join("counts.txt");
    let a = run(&orig, &[]);
    let n = run(&new, &[("MANTLE_TEST_FAST_OUT", &counts)]);
    assert_eq!((a.stdout, a.code), (n.stdout, n.code), "{}", n.stderr);
    // The hooks ran: every instrumented function entered.
    let entered = std::fs::read_to_string(&counts).unwrap().lines().count();
    assert_eq!(entered, 10, "functions entered");
}

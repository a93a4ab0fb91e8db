//! Fixtures compiled from tests/c in the test: each is rewritten with every
//! function chosen, linked with libmantle-instr, and must print what the
//! original prints, exit as it exits, and the tracer's call counts must
//! equal the counts the program keeps itself. Unsafe sites are refused
//! with the right reason; C++ objects are refused and still work.

use mantle_instr::{ExitMode, Outcome, Refusal, Selection};
use mantle_testsupport::build::{run_cc, workspace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(name)
}

/// libmantle_instr.a of this build profile, (re)built by cargo.
fn runtime() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "mantle-instr-rt", "--lib"])
        .current_dir(workspace());
    if !profile.ends_with("debug") {
        cmd.arg("--release");
    }
    assert!(
        cmd.status().unwrap().success(),
        "cargo build -p mantle-instr-rt"
    );
    profile.join("libmantle_instr.a")
}

fn tmpdir(name: &str) -> PathBuf {
    // Tests run in parallel and may build the same fixture.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!(
        "mantle-instr-test-{}-{n}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Built {
    dir: PathBuf,
    obj: PathBuf,
    cc: &'static str,
    no_pie: bool,
}

fn compile(name: &str, cc: &'static str, flags: &[&str]) -> Built {
    let dir = tmpdir(name);
    let obj = dir.join("orig.o");
    run_cc(
        name,
        Command::new(cc)
            .args(flags)
            .arg("-c")
            .arg(src(name))
            .arg("-o")
            .arg(&obj),
    );
    Built {
        dir,
        obj,
        cc,
        no_pie: flags.contains(&"-fno-pie"),
    }
}

fn link(b: &Built, obj: &Path, out: &str, rt: Option<&Path>) -> PathBuf {
    let exe = b.dir.join(out);
    let mut c = Command::new(b.cc);
    c.arg(obj).arg("-o").arg(&exe);
    if b.no_pie {
        c.arg("-no-pie");
    }
    if let Some(rt) = rt {
        c.arg(rt);
    }
    c.args(["-lpthread", "-lm"]);
    run_cc(out, &mut c);
    exe
}

struct Run {
    stdout: String,
    code: Option<i32>,
}

fn run(exe: &Path, env: &[(&str, &Path)]) -> Run {
    let mut c = Command::new(exe);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Run {
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        code: o.status.code(),
    }
}

/// Rewrites, links, runs; returns (original run, rewritten run, profile
/// calls by name, report).
fn instrument_as(
    b: &Built,
    mode: ExitMode,
) -> (Run, Run, BTreeMap<String, u64>, mantle_instr::Report) {
    let data = std::fs::read(&b.obj).unwrap();
    let (bytes, report) =
        mantle_instr::rewrite_file(&data, "orig.o", &Selection::all(), 0, mode).unwrap();
    let new_obj = b.dir.join("instr.o");
    std::fs::write(&new_obj, bytes).unwrap();
    let map = b.dir.join("map.tsv");
    std::fs::write(&map, report.map_lines()).unwrap();
    let orig = link(b, &b.obj, "orig", None);
    let new = link(b, &new_obj, "instr", Some(&runtime()));
    let prof = b.dir.join("prof.json");
    let a = run(&orig, &[]);
    let n = run(
        &new,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    let mut calls = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(&prof) {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for f in v["functions"].as_array().unwrap() {
            calls.insert(
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            );
        }
    }
    (a, n, calls, report)
}

/// The "count NAME N" lines a fixture prints.
fn own_counts(out: &str) -> BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("count "))
        .map(|l| {
            let (n, c) = l.split_once(' ').unwrap();
            (n.to_string(), c.parse().unwrap())
        })
        .collect()
}

const C_FLAGS: &[&str] = &[
    "-O2",
    "-fno-inline",
    "-fno-ipa-cp",
    "-fno-ipa-sra",
    "-fno-partial-inlining",
];

/// Every exit design: return frames everywhere; patched rets where every
/// exit is a patchable ret (at least one function must get them); auto,
/// call-through trampolines for every function.
fn check_exact(name: &str, flags: &[&str]) {
    let b = compile(name, "cc", flags);
    for mode in [
        ExitMode::ReturnFrames,
        ExitMode::PatchedRets,
        ExitMode::Auto,
    ] {
        check_mode(name, &b, mode);
    }
    check_hooks(name, &b, true, true);
    check_hooks(name, &b, false, true);
}

/// Trampolines with user hooks, fast or ordinary (the assembly path, no
/// Rust frames): same output (or, if not `exact`, the same lines but the
/// counts, which then vary by run), every entry counted as the rewritten
/// program counted it, and every function but `main` (still running when
/// the counts are written) left as often as entered.
fn check_hooks(name: &str, b: &Built, fast: bool, exact: bool) {
    let data = std::fs::read(&b.obj).unwrap();
    let (bytes, report) =
        mantle_instr::rewrite_file(&data, "orig.o", &Selection::all(), 0, ExitMode::Auto).unwrap();
    let new_obj = b.dir.join("tramp.o");
    std::fs::write(&new_obj, bytes).unwrap();
    let tag = if fast { "fast" } else { "ordinary" };
    let hooks = b.dir.join(format!("{tag}_hooks.o"));
    let inc = workspace().join("crates/instr-rt/include");
    run_cc(
        "fast_hooks.c",
        Command::new("cc")
            .args(if fast {
                ["-mgeneral-regs-only", "-UORDINARY"]
            } else {
                ["-DORDINARY", "-O2"]
            })
            .args(["-O2", "-c", "-I"])
            .arg(&inc)
            .arg(src("fast_hooks.c"))
            .arg("-o")
            .arg(&hooks),
    );
    let exe = b.dir.join(tag);
    let mut c = Command::new(b.cc);
    c.arg(&new_obj).arg(&hooks).arg("-o").arg(&exe);
    if b.no_pie {
        c.arg("-no-pie");
    }
    run_cc(tag, c.arg(runtime()).args(["-lpthread", "-lm"]));
    let counts = b.dir.join(format!("{tag}.txt"));
    let a = run(&b.dir.join("orig"), &[]);
    let n = run(&exe, &[("MANTLE_TEST_FAST_OUT", &counts)]);
    let result = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| exact || !l.starts_with("count "))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        (result(&a.stdout), a.code),
        (result(&n.stdout), n.code),
        "{name} {tag} hooks"
    );
    let mut by_id = BTreeMap::new();
    for l in std::fs::read_to_string(&counts).unwrap().lines() {
        let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
        by_id.insert(v[0] as u32, (v[1], v[2]));
    }
    let own = own_counts(&n.stdout);
    let mut checked = 0;
    for f in &report.functions {
        let Outcome::Instrumented { id, .. } = f.outcome else {
            continue;
        };
        checked += usize::from(own.contains_key(&f.name));
        let (enters, leaves) = by_id.get(&id).copied().unwrap_or((0, 0));
        if let Some(c) = own.get(&f.name) {
            assert_eq!(enters, *c, "{name} {tag} hooks: entries of {}", f.name);
        }
        if f.name != "main" {
            assert_eq!(leaves, enters, "{name} {tag} hooks: exits of {}", f.name);
        }
    }
    assert_eq!(
        checked,
        own.len(),
        "{name}: every counted function instrumented"
    );
}

/// How many instrumented functions got the exit `kind`.
fn exits(report: &mantle_instr::Report, kind: &str) -> usize {
    report
        .functions
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Instrumented { exit, .. } if exit == kind))
        .count()
}

fn check_mode(name: &str, b: &Built, mode: ExitMode) {
    let (a, n, calls, report) = instrument_as(b, mode);
    match mode {
        ExitMode::ReturnFrames => assert_eq!(exits(&report, "return-frame"), report.instrumented),
        ExitMode::PatchedRets => assert!(exits(&report, "balanced") > 0, "{name}: none balanced"),
        ExitMode::Auto => assert_eq!(exits(&report, "trampoline"), report.instrumented),
    }
    assert_eq!(report.refused, 0, "{name}: {:#?}", report.functions);
    assert_eq!(a.stdout, n.stdout, "{name}: output differs");
    assert_eq!(a.code, n.code, "{name}: exit status differs");
    let own = own_counts(&a.stdout);
    assert!(!own.is_empty());
    for (f, c) in &own {
        assert_eq!(
            calls.get(f),
            Some(c),
            "{name} {mode:?}: calls of {f}: tracer {calls:?} program {own:?}"
        );
    }
}

#[test]
fn recursion_varargs_many_args_pointers_tail_calls() {
    check_exact("basic.c", C_FLAGS);
}

/// Vector registers across the hooks: ordinary hooks that clobber every
/// caller-saved register (fast_hooks.c), callers keeping doubles in xmm
/// registers across calls (-fipa-ra), arguments and results passing
/// through functions that never name them; and the counts the report
/// gives for each (crates/instr/src/vregs.rs).
#[test]
fn vector_registers_across_ordinary_hooks() {
    check_exact("xmm.c", C_FLAGS);
    let b = compile("xmm.c", "cc", C_FLAGS);
    let data = std::fs::read(&b.obj).unwrap();
    let (_, report) =
        mantle_instr::rewrite_file(&data, "xmm.o", &Selection::all(), 0, ExitMode::Auto).unwrap();
    let kept: BTreeMap<&str, [u8; 2]> = report
        .functions
        .iter()
        .filter_map(|f| match f.outcome {
            Outcome::Instrumented { xmm_kept, .. } => Some((f.name.as_str(), xmm_kept?)),
            _ => None,
        })
        .collect();
    // leaf's callers keep doubles in a few low registers (main's too);
    // leaf2's caller keeps fifteen; pass and ret_through pass arguments
    // and a result through; out calls libm (unknown: every argument).
    let (leaf, leaf2) = (kept["leaf"], kept["leaf2"]);
    assert!(
        leaf[0] > 0 && leaf[0] < 16 && leaf == [leaf[0]; 2],
        "{kept:?}"
    );
    assert!(leaf2[0] >= 15, "{kept:?}");
    assert!(kept["pass"][0] >= 2, "{kept:?}");
    assert!(kept["ret_through"][1] >= 1, "{kept:?}");
    assert!(kept["out"][0] == 8 && kept["out"][1] >= 2, "{kept:?}");
}

#[test]
fn basic_with_endbr64() {
    let mut f = C_FLAGS.to_vec();
    f.push("-fcf-protection=full");
    let b = compile("basic.c", "cc", &f);
    // A return frame's ret would fault on a shadow stack: the property is
    // cleared. Trampolines keep every call paired with its ret: kept.
    for (mode, cleared) in [(ExitMode::ReturnFrames, true), (ExitMode::Auto, false)] {
        let (a, n, _, report) = instrument_as(&b, mode);
        assert_eq!(report.cet_cleared, cleared, "{mode:?}");
        assert!(report
            .functions
            .iter()
            .all(|f| matches!(f.outcome, Outcome::Instrumented { endbr64: true, .. })));
        assert_eq!((&a.stdout, a.code), (&n.stdout, n.code));
    }
}

/// Signal handlers that run instrumented code, arriving anywhere (also
/// inside the trampolines' entry and exit paths): the hooks' counts equal
/// the program's. Trampolines with user hooks only: the tracer's frames
/// are not async-signal-safe (docs/instr.md).
#[test]
fn signals() {
    let b = compile("signals.c", "cc", C_FLAGS);
    link(&b, &b.obj, "orig", None);
    check_hooks("signals.c", &b, true, false);
    check_hooks("signals.c", &b, false, false);
}

#[test]
fn setjmp_longjmp() {
    check_exact("jmp.c", C_FLAGS);
}

#[test]
fn threads() {
    check_exact("threads.c", C_FLAGS);
}

#[test]
fn unsafe_sites_are_refused_with_their_reason() {
    let b = compile("unsafe.c", "cc", &["-O2", "-fno-inline"]);
    for mode in [ExitMode::Auto, ExitMode::PatchedRets] {
        refusals(&b, mode);
    }
}

/// The refusals of unsafe.c under `mode`: a trampoline patches 5 bytes
/// and moves its instructions without following the stack, a stub 11 and
/// follows it.
fn refusals(b: &Built, mode: ExitMode) {
    let (a, n, _, report) = instrument_as(b, mode);
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code));
    let reason = |f: &str| match &report
        .functions
        .iter()
        .find(|x| x.name == f)
        .unwrap()
        .outcome
    {
        Outcome::Refused { reason } => Some(reason.clone()),
        Outcome::Instrumented { .. } => None,
    };
    assert!(
        matches!(reason("loop_in"), Some(Refusal::BranchTarget { offset: 2 })),
        "{:?}",
        reason("loop_in")
    );
    assert!(
        matches!(reason("tiny"), Some(Refusal::TooShort { need, .. }) if need == if mode == ExitMode::Auto { 5 } else { 11 }),
        "{:?}",
        reason("tiny")
    );
    if mode == ExitMode::Auto {
        assert_eq!(reason("realign"), None, "a trampoline's body may realign");
    } else {
        assert!(
            matches!(reason("realign"), Some(Refusal::Unrelocatable { why, .. }) if why.contains("rsp")),
            "{:?}",
            reason("realign")
        );
    }
    assert_eq!(reason("early"), None, "a moved short branch");
    assert!(
        matches!(
            reason("loop_entry"),
            Some(Refusal::BranchTarget { offset: 0 })
        ),
        "{:?}",
        reason("loop_entry")
    );
    // r11 is free in the overwritten bytes: the stub uses no register.
    assert_eq!(reason("uses_r11"), None);
    assert!(
        matches!(reason("where"), Some(Refusal::ReadsReturnAddress { .. })),
        "{:?}",
        reason("where")
    );
    assert_eq!(reason("plain"), None);
    assert_eq!(reason("main"), None);
}

#[test]
fn cxx_exceptions() {
    // Non-PIC: the personality routine is then referenced from .eh_frame
    // directly, without the DW.ref COMDAT group PIC code needs.
    let b = compile("cxx.cpp", "c++", &["-O2", "-fno-pie"]);
    // Return frames everywhere: every function refused, the program works.
    let (a, n, calls, report) = instrument_as(&b, ExitMode::ReturnFrames);
    assert_eq!(report.instrumented, 0);
    let reason = |name: &str| {
        let f = report
            .functions
            .iter()
            .find(|f| f.name.contains(name))
            .unwrap();
        match &f.outcome {
            Outcome::Refused { reason } => Some(reason.clone()),
            _ => None,
        }
    };
    assert_eq!(reason("middle"), Some(Refusal::CxxExceptions));
    assert_eq!(reason("throweri.cold"), Some(Refusal::NotAnEntry));
    assert!(calls.is_empty());
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code));
    // Balanced exits: the exception crosses instrumented `middle`; the
    // output and every instrumented function's count are exact.
    let (a, n, calls, report) = instrument_as(&b, ExitMode::Auto);
    let middle = report
        .functions
        .iter()
        .find(|f| f.name.contains("middle"))
        .unwrap();
    assert!(
        matches!(
            middle.outcome,
            Outcome::Instrumented {
                exit: "balanced",
                ..
            }
        ),
        "{:?}",
        middle.outcome
    );
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code));
    let own = own_counts(&a.stdout);
    for f in report
        .functions
        .iter()
        .filter(|f| matches!(f.outcome, Outcome::Instrumented { .. }))
    {
        let short = own.keys().find(|k| f.name.contains(k.as_str())).unwrap();
        assert_eq!(
            calls.get(&f.name),
            own.get(short),
            "{}: {calls:?} {own:?}",
            f.name
        );
    }
}

/// Not x86-64, not relocatable, not ELF, truncated or corrupted: an error,
/// never a panic.
#[test]
fn bad_files_are_errors() {
    let b = compile("basic.c", "cc", C_FLAGS);
    let good = std::fs::read(&b.obj).unwrap();
    let sel = Selection::all();
    let mut arm = good.clone();
    arm[18] = 183; // e_machine = EM_AARCH64
    let e = mantle_instr::rewrite_file(&arm, "x", &sel, 0, ExitMode::Auto).unwrap_err();
    assert!(e.to_string().contains("not x86-64"), "{e}");
    let mut exec = good.clone();
    exec[16] = 2; // e_type = ET_EXEC
    assert!(matches!(
        mantle_instr::rewrite_file(&exec, "x", &sel, 0, ExitMode::Auto),
        Err(mantle_instr::Error::Unsupported(_))
    ));
    assert!(mantle_instr::rewrite_file(b"#!/bin/sh\n", "x", &sel, 0, ExitMode::Auto).is_err());
    assert!(mantle_instr::rewrite_file(&[], "x", &sel, 0, ExitMode::Auto).is_err());
    // Every truncation length, and pseudo-random byte corruptions.
    for len in 0..good.len().min(4096) {
        let _ = mantle_instr::rewrite_file(&good[..len], "x", &sel, 0, ExitMode::Auto);
    }
    let mut x: u64 = 0x9e3779b97f4a7c15;
    // MANTLE_INSTR_FUZZ_ITERS runs longer (docs/instr.md: the run reported).
    let iters = std::env::var("MANTLE_INSTR_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000u64);
    let modes = [
        ExitMode::Auto,
        ExitMode::PatchedRets,
        ExitMode::ReturnFrames,
    ];
    for n in 0..iters {
        let mut d = good.clone();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x as usize) % d.len();
            d[i] = (x >> 32) as u8;
        }
        let _ = mantle_instr::rewrite_file(&d, "x", &sel, 0, modes[n as usize % 3]);
        if n % 100_000 == 0 && n > 0 {
            eprintln!("fuzz: {n} corrupted objects, no panic");
        }
    }
}

/// Objects with COMDAT section groups (most C++) are refused as a whole,
/// with a clear error.
#[test]
fn section_groups_are_unsupported() {
    let dir = tmpdir("groups");
    let s = dir.join("g.cpp");
    std::fs::write(&s, "template <class T> T g(T x) { return x * 2; }\nlong f(int x) { return g(x) + g<long>(x); }\n").unwrap();
    let obj = dir.join("g.o");
    run_cc(
        "g.cpp",
        Command::new("c++")
            .args(["-O0", "-c"])
            .arg(&s)
            .arg("-o")
            .arg(&obj),
    );
    let e = mantle_instr::rewrite_file(
        &std::fs::read(&obj).unwrap(),
        "g.o",
        &Selection::all(),
        0,
        ExitMode::Auto,
    )
    .unwrap_err();
    assert!(e.to_string().contains("section groups"), "{e}");
}

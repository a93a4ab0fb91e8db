//! Fixtures compiled from tests/c in the test: each is rewritten with every
//! function chosen, linked with libmantle-instr, and must print what the
//! original prints, exit as it exits, and the tracer's call counts must
//! equal the counts the program keeps itself. Unsafe sites are refused
//! with the right reason. C++ objects, with their COMDAT section groups,
//! are rewritten too: the stubs of a grouped function go with its group
//! (kept or discarded by the linker with it).

mod common;

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

/// libmantle_instr_rt.a of this build profile, (re)built by cargo.
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
    profile.join("libmantle_instr_rt.a")
}

fn tmpdir(name: &str) -> PathBuf {
    // Tests run in parallel and may build the same fixture.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Under one scratch directory, removed when the test binary exits
    // (and by a later run if this one was killed).
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| mantle_testsupport::scratch::dir("instr-fixtures"));
    let d = root.join(format!("{n}-{name}"));
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

fn link(b: &Built, objs: &[&Path], out: &str, rt: Option<&Path>) -> PathBuf {
    let exe = b.dir.join(out);
    let mut c = Command::new(b.cc);
    c.args(objs).arg("-o").arg(&exe);
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
    let orig = link(b, &[&b.obj], "orig", None);
    let new = link(b, &[&new_obj], "instr", Some(&runtime()));
    let prof = b.dir.join("prof.json");
    let a = run(&orig, &[]);
    let n = run(
        &new,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    let calls = profile(&prof)
        .into_iter()
        .map(|(_, name, calls)| (name, calls))
        .collect();
    (a, n, calls, report)
}

/// The tracer's (id, name, calls) of each function it saw called (none if
/// it wrote no profile).
fn profile(path: &Path) -> Vec<(u32, String, u64)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    common::profile_json(&text)
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

/// fast_hooks.c compiled as fast hooks or as ordinary ones, in `b`'s
/// directory.
fn hooks_object(b: &Built, fast: bool) -> PathBuf {
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
    hooks
}

/// `b` rewritten with trampolines for the functions `sel` chooses and
/// linked with fast_hooks.c (fast or ordinary) and the runtime: the
/// program ("fast" or "ordinary" in `b`'s directory) and the report.
fn with_hooks(b: &Built, fast: bool, sel: &Selection) -> (PathBuf, mantle_instr::Report) {
    let data = std::fs::read(&b.obj).unwrap();
    let (bytes, report) =
        mantle_instr::rewrite_file(&data, "orig.o", sel, 0, ExitMode::Auto).unwrap();
    let new_obj = b.dir.join("tramp.o");
    std::fs::write(&new_obj, bytes).unwrap();
    let hooks = hooks_object(b, fast);
    let tag = if fast { "fast" } else { "ordinary" };
    (link(b, &[&new_obj, &hooks], tag, Some(&runtime())), report)
}

/// Trampolines with user hooks, fast or ordinary (the assembly path, no
/// Rust frames): same output (or, if not `exact`, the same lines but the
/// counts, which then vary by run), every entry counted as the rewritten
/// program counted it, and every function but `main` (still running when
/// the counts are written) left as often as entered.
fn check_hooks(name: &str, b: &Built, fast: bool, exact: bool) -> BTreeMap<String, u64> {
    check_hooks_of(name, b, fast, exact, &Selection::all())
}

/// [`check_hooks`] with the functions `sel` chooses instrumented.
fn check_hooks_of(
    name: &str,
    b: &Built,
    fast: bool,
    exact: bool,
    sel: &Selection,
) -> BTreeMap<String, u64> {
    let (exe, report) = with_hooks(b, fast, sel);
    let tag = if fast { "fast" } else { "ordinary" };
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
    own
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

/// Objects clang wrote: section names in the symbols' string table (the
/// rewrite adds a `.shstrtab`) and an address-significance table (dropped:
/// its symbol indices change). Every exit design, the tracer's counts and
/// both kinds of user hooks, as for gcc's objects.
#[test]
fn clang_objects() {
    for name in ["basic.c", "xmm.c"] {
        // clang ignores the optimize attribute basic.c uses to keep fib's
        // recursion real (its tail-recursion elimination would loop).
        let b = compile(
            name,
            "clang",
            &["-O2", "-fno-inline", "-fno-optimize-sibling-calls"],
        );
        let data = std::fs::read(&b.obj).unwrap();
        assert!(
            data.windows(14).any(|w| w == b".llvm_addrsig\0"),
            "{name}: clang wrote no address-significance table"
        );
        for mode in [ExitMode::ReturnFrames, ExitMode::Auto] {
            check_mode(name, &b, mode);
        }
        check_hooks(name, &b, true, true);
        check_hooks(name, &b, false, true);
    }
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
    link(&b, &[&b.obj], "orig", None);
    check_hooks("signals.c", &b, true, false);
    check_hooks("signals.c", &b, false, false);
}

/// A handler running instrumented code at every instruction of the
/// trampolines' paths (the trap flag steps them: tests/c/sigstep.c), so
/// also at every two consecutive instructions, the pair the timer fixture
/// above meets only by chance.
#[test]
fn signal_at_every_instruction() {
    check_stepped("sigstep.c");
}

/// The same with the handler on an alternate signal stack, one below the
/// stepped frames and one above them (tests/c/sigalt.c).
#[test]
fn signal_on_alternate_stacks_at_every_instruction() {
    check_stepped("sigalt.c");
}

/// A handler closing frames skipped by longjmp while the code it
/// interrupted closes them too, at every instruction of that closing
/// (tests/c/sigpop.c, its handler left uninstrumented): each frame is
/// closed once, with its own leave, and the handler called mid() at all
/// 400 steps it aimed at.
#[test]
fn handler_closing_skipped_frames_at_every_instruction() {
    let b = compile("sigpop.c", "cc", C_FLAGS);
    link(&b, &[&b.obj], "orig", None);
    let mut sel = Selection::default();
    for f in ["main", "mid", "leaf", "padded", "jump"] {
        sel.add_exact(f);
    }
    for fast in [true, false] {
        let own = check_hooks_of("sigpop.c", &b, fast, false, &sel);
        assert_eq!(own["mid"], 800, "sigpop.c (fast hooks {fast}): {own:?}");
    }
}

/// A fixture whose SIGTRAP handler runs at each step: output and hook
/// counts as [`check_hooks`] wants them, and the rewritten program must
/// take more steps than the original (its trampolines add instructions),
/// or the stepping did not happen and the test proved nothing.
fn check_stepped(name: &str) {
    let b = compile(name, "cc", C_FLAGS);
    let orig = run(&link(&b, &[&b.obj], "orig", None), &[]);
    assert_eq!(orig.code, Some(0), "{name}: {:?}", orig.stdout);
    let plain = own_counts(&orig.stdout)["on_trap"];
    assert!(plain > 100, "{name} stepped only {plain} instructions");
    for fast in [true, false] {
        let steps = check_hooks(name, &b, fast, false)["on_trap"];
        assert!(
            steps > plain,
            "{name} (fast hooks {fast}): {steps} steps, the original {plain}"
        );
    }
}

/// Handlers that leave by siglongjmp from every instruction of a call's
/// trampolines and hooks (tests/c/sigjump.c): the program gets past what
/// each jump abandoned (a push claimed but not counted among others) and
/// prints what the original prints. Hook counts are not compared: a jump
/// between an entry hook and the body, or out of a hook, leaves them
/// unpaired by design. The rewritten call must take more steps than the
/// original (so every one of its instructions was a jump's point).
#[test]
fn siglongjmp_out_of_handlers_at_every_instruction() {
    let b = compile("sigjump.c", "cc", C_FLAGS);
    let orig = run(&link(&b, &[&b.obj], "orig", None), &[]);
    let steps = |r: &Run| -> u64 {
        r.stdout
            .lines()
            .find_map(|l| l.strip_prefix("steps "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let result = |r: &Run| -> (Vec<String>, Option<i32>) {
        let lines = r.stdout.lines().filter(|l| l.starts_with("result "));
        (lines.map(String::from).collect(), r.code)
    };
    assert!(steps(&orig) > 10, "sigjump.c: {:?}", orig.stdout);
    for fast in [true, false] {
        let (exe, _) = with_hooks(&b, fast, &Selection::all());
        let tag = if fast { "fast" } else { "ordinary" };
        let out = b.dir.join(format!("{tag}.txt"));
        let n = run(&exe, &[("MANTLE_TEST_FAST_OUT", &out)]);
        assert_eq!(result(&orig), result(&n), "sigjump.c {tag} hooks");
        assert!(
            steps(&n) > steps(&orig),
            "sigjump.c {tag} hooks: {} steps, the original {}",
            steps(&n),
            steps(&orig)
        );
    }
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
    // The default exits: trampolines (the runtime uninstalls them for
    // the unwinder); the exception crosses instrumented `middle`; the
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
                exit: "trampoline",
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
    fuzz(&good, None);
}

/// Every truncation length, and pseudo-random corruptions of 4 bytes
/// each, anywhere or (with `within`) inside these byte ranges: an error or
/// a rewrite, never a panic.
fn fuzz(good: &[u8], within: Option<&[std::ops::Range<usize>]>) {
    let sel = Selection::all();
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
        let mut d = good.to_vec();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = match within {
                None => (x as usize) % d.len(),
                Some(r) => {
                    let r = &r[(x >> 40) as usize % r.len()];
                    r.start + (x as usize) % r.len()
                }
            };
            d[i] = (x >> 32) as u8;
        }
        let _ = mantle_instr::rewrite_file(&d, "x", &sel, 0, modes[n as usize % 3]);
        if n % 100_000 == 0 && n > 0 {
            eprintln!("fuzz: {n} corrupted objects, no panic");
        }
    }
}

/// C++ with inline functions, templates, a vtable and an exception
/// crossing instrumented inline and template frames, all in COMDAT
/// groups: PIC (which adds the DW.ref personality's data group) and not,
/// optimized and not (-O0: every library template instance too).
/// Same output, and exact counts where every instance of a counted
/// function is instrumented; every stub of a grouped function is in its
/// group.
#[test]
fn comdat_templates_inline_exceptions() {
    for flags in [
        &["-O2", "-fno-inline", "-fPIC"][..],
        &["-O2", "-fno-inline", "-fno-pie"],
        &["-O0", "-fPIC"],
    ] {
        let b = compile("comdat.cpp", "c++", flags);
        for mode in [ExitMode::Auto, ExitMode::PatchedRets] {
            let (a, n, calls, report) = instrument_as(&b, mode);
            let what = format!("comdat.cpp {flags:?} {mode:?}");
            assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "{what}");
            let grouped = |f: &&mantle_instr::Function| f.comdat.is_some();
            assert!(
                report.functions.iter().filter(grouped).count() > 10,
                "{what}"
            );
            let own = own_counts(&a.stdout);
            assert_eq!(own.len(), 8, "{what}");
            for (counter, count) in &own {
                // The program's own functions; a counter counts every
                // instance of its template.
                let instances: Vec<_> = report
                    .functions
                    .iter()
                    .filter(|f| f.name.contains(counter.as_str()) && !f.name.contains('.'))
                    .filter(|f| !f.name.starts_with("_ZNSt"))
                    .collect();
                let instrumented: Vec<_> = instances
                    .iter()
                    .filter(|f| matches!(f.outcome, Outcome::Instrumented { .. }))
                    .collect();
                let traced: u64 = instrumented
                    .iter()
                    .map(|f| calls.get(&f.name).copied().unwrap_or(0))
                    .sum();
                if instrumented.len() == instances.len() {
                    assert_eq!(traced, *count, "{what}: {counter} {calls:?}");
                } else {
                    assert!(traced <= *count, "{what}: {counter} {calls:?}");
                }
                // The exception's path, inline and template, and the
                // class templates' members are all instrumented.
                if ["thrower", "middle", "total", "put"].contains(&counter.as_str()) {
                    assert_eq!(
                        instrumented.len(),
                        instances.len(),
                        "{what}: {counter}: {instances:#?}"
                    );
                    assert!(instances.iter().all(|f| f.comdat.is_some()), "{what}");
                }
            }
            let out = std::fs::read(b.dir.join("instr.o")).unwrap();
            stubs_in_groups(&out, &report);
        }
    }
}

/// Every group of a rewritten object whose function was instrumented has
/// that function's stub section and its relocations; no stub section of
/// a group is outside it.
fn stubs_in_groups(out: &[u8], report: &mantle_instr::Report) {
    use object::{Object, ObjectComdat, ObjectSection};
    let f = object::File::parse(out).unwrap();
    let mut seen = 0;
    for c in f.comdats() {
        let sig = c.name().unwrap();
        let names: Vec<String> = c
            .sections()
            .map(|i| f.section_by_index(i).unwrap().name().unwrap().to_string())
            .collect();
        let stub = format!(".text.mantle_instr.{sig}");
        let instrumented = report.functions.iter().any(|x| {
            x.comdat.as_deref() == Some(sig) && matches!(x.outcome, Outcome::Instrumented { .. })
        });
        assert_eq!(names.contains(&stub), instrumented, "{sig}: {names:?}");
        assert_eq!(
            names.contains(&format!(".rela{stub}")),
            instrumented,
            "{sig}: {names:?}"
        );
        seen += usize::from(instrumented);
    }
    let stub_sections = f
        .sections()
        .filter(|s| s.name().unwrap().starts_with(".text.mantle_instr."))
        .count();
    assert!(seen > 0);
    assert_eq!(seen, stub_sections);
}

/// Two translation units with their own copies of an inline function and
/// a template instance: the linker keeps the first object's group, stubs
/// and id included, whether or not the other copy is instrumented.
#[test]
fn comdat_two_units_first_copy_wins() {
    let a = compile("comdat2_a.cpp", "c++", &["-O2", "-fPIC"]);
    let b = compile("comdat2_b.cpp", "c++", &["-O2", "-fPIC"]);
    let rewrite = |o: &Built, first_id: u32, name: &str| {
        let data = std::fs::read(&o.obj).unwrap();
        let (bytes, report) =
            mantle_instr::rewrite_file(&data, name, &Selection::all(), first_id, ExitMode::Auto)
                .unwrap();
        assert_eq!(report.refused, 0, "{name}: {:#?}", report.functions);
        let path = a.dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        (path, report)
    };
    let (ai, ra) = rewrite(&a, 0, "a.instr.o");
    let (bi, rb) = rewrite(&b, 100, "b.instr.o");
    let id = |r: &mantle_instr::Report, name: &str| {
        let f = r.functions.iter().find(|f| f.name == name).unwrap();
        match f.outcome {
            Outcome::Instrumented { id, .. } => (id, f.comdat.clone()),
            _ => panic!("{name} refused"),
        }
    };
    let shared = "_Z6sharedl";
    let scale = "_Z5scaleIlET_S0_";
    assert_eq!(id(&ra, shared), (0, Some(shared.to_string())));
    assert_eq!(id(&ra, "main"), (2, None));
    let (b_shared, _) = id(&rb, shared);
    let (b_scale, _) = id(&rb, scale);
    let (a_scale, _) = id(&ra, scale);
    let map = a.dir.join("map.tsv");
    std::fs::write(&map, ra.map_lines() + &rb.map_lines()).unwrap();
    let orig = run(&link(&a, &[&a.obj, &b.obj], "orig2", None), &[]);
    let own = own_counts(&orig.stdout);
    let rt = runtime();
    // (link order, the ids `shared` and `scale<long>` are counted under).
    /// Objects in link order; the ids of `shared` and `scale<long>`.
    type Case<'a> = (&'a [&'a Path], Option<(u32, u32)>);
    let cases: [Case; 4] = [
        (&[&ai, &bi], Some((0, a_scale))),
        (&[&bi, &ai], Some((b_shared, b_scale))),
        (&[&ai, &b.obj], Some((0, a_scale))),
        (&[&b.obj, &ai], None),
    ];
    for (n, (objs, ids)) in cases.into_iter().enumerate() {
        let out = format!("two{n}");
        let exe = link(&a, objs, &out, Some(&rt));
        let prof = a.dir.join(format!("{out}.json"));
        let r = run(
            &exe,
            &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
        );
        assert_eq!((&orig.stdout, orig.code), (&r.stdout, r.code), "{objs:?}");
        let p = profile(&prof);
        let calls_of = |name: &str| -> Vec<(u32, u64)> {
            p.iter()
                .filter(|(_, n, _)| n == name)
                .map(|&(id, _, c)| (id, c))
                .collect()
        };
        match ids {
            Some((sh, sc)) => {
                assert_eq!(calls_of(shared), [(sh, own["shared"])], "{objs:?}");
                // scale<double> is only in b: counted when b is rewritten.
                let sc_calls: u64 = calls_of(scale).iter().map(|&(_, c)| c).sum();
                assert_eq!(calls_of(scale)[0].0, sc, "{objs:?}");
                assert!(sc_calls < own["scale"], "{objs:?}");
            }
            None => {
                assert_eq!(calls_of(shared), [], "{objs:?}");
                assert_eq!(calls_of(scale), [], "{objs:?}");
            }
        }
        let all: u64 = ["_Z5scaleIlET_S0_", "_Z5scaleIdET_S0_"]
            .iter()
            .flat_map(|n| calls_of(n))
            .map(|(_, c)| c)
            .sum();
        if n < 2 {
            assert_eq!(all, own["scale"], "{objs:?}");
        }
    }
}

/// A section group's header and table, by file offset.
struct GroupAt {
    header: usize,
    table: std::ops::Range<usize>,
    index: u32,
}

fn groups_at(data: &[u8]) -> Vec<GroupAt> {
    use object::read::elf::{FileHeader, SectionHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(data).unwrap();
    let e = h.endian().unwrap();
    let shoff = h.e_shoff(e) as usize;
    h.sections(e, data)
        .unwrap()
        .enumerate()
        .filter(|(_, s)| s.sh_type(e) == object::elf::SHT_GROUP)
        .map(|(i, s)| {
            let (off, size) = s.file_range(e).unwrap();
            GroupAt {
                header: shoff + i.0 * 64,
                table: off as usize..(off + size) as usize,
                index: i.0 as u32,
            }
        })
        .collect()
}

/// Corrupted section groups: each a clear error, never a panic; then
/// random corruption of the groups' headers and tables.
#[test]
fn corrupted_groups_are_errors() {
    let b = compile("comdat.cpp", "c++", &["-O2", "-fPIC"]);
    let good = std::fs::read(&b.obj).unwrap();
    let groups = groups_at(&good);
    assert!(groups.len() > 10);
    // The first group with two members, and a second group.
    let g = groups.iter().find(|g| g.table.len() >= 12).unwrap();
    let other = groups.iter().find(|o| o.index != g.index).unwrap();
    let u32_at = |d: &[u8], at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    let shnum = u32::from(u16::from_le_bytes([good[0x3c], good[0x3d]]));
    let symtab = (0..shnum)
        .find(|&i| {
            let h = u32_at(&good, 0x28) as usize + i as usize * 64;
            u32_at(&good, h + 4) == object::elf::SHT_SYMTAB
        })
        .unwrap();
    let member = u32_at(&good, g.table.start + 4);
    let member_flags = u32_at(&good, 0x28) as usize + member as usize * 64 + 8;
    let put = |d: &mut Vec<u8>, at: usize, v: u64, n: usize| {
        d[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
    };
    /// What, how, and what the error says.
    type Corruption<'a> = (&'a str, Box<dyn Fn(&mut Vec<u8>) + 'a>, &'a str);
    let cases: Vec<Corruption> = vec![
        (
            "member 0",
            Box::new(|d| put(d, g.table.start + 4, 0, 4)),
            "member index 0",
        ),
        (
            "member past the table",
            Box::new(|d| put(d, g.table.start + 4, shnum.into(), 4)),
            "out of range",
        ),
        (
            "member 2^32-1",
            Box::new(|d| put(d, g.table.start + 8, u32::MAX.into(), 4)),
            "out of range",
        ),
        (
            "member itself",
            Box::new(|d| put(d, g.table.start + 4, g.index.into(), 4)),
            "out of range",
        ),
        (
            "member the symbol table",
            Box::new(|d| put(d, g.table.start + 4, symtab.into(), 4)),
            "section type",
        ),
        (
            "member twice",
            Box::new(|d| put(d, g.table.start + 8, member.into(), 4)),
            "two groups",
        ),
        (
            "member in another group",
            Box::new(|d| put(d, other.table.start + 4, member.into(), 4)),
            "two groups",
        ),
        (
            "member not SHF_GROUP",
            Box::new(|d| d[member_flags + 1] &= !2),
            "not flagged SHF_GROUP",
        ),
        (
            "flags 2",
            Box::new(|d| put(d, g.table.start, 2, 4)),
            "flags 0x2",
        ),
        (
            "flags all",
            Box::new(|d| put(d, g.table.start, u32::MAX.into(), 4)),
            "flags 0xffffffff",
        ),
        ("empty", Box::new(|d| put(d, g.header + 32, 0, 8)), "empty"),
        (
            "not whole words",
            Box::new(|d| put(d, g.header + 32, 6, 8)),
            "whole words",
        ),
        (
            "table past the end",
            Box::new(|d| put(d, g.header + 32, 1 << 40, 8)),
            "beyond the file",
        ),
        (
            "offset past the end",
            Box::new(|d| put(d, g.header + 24, u64::MAX - 2, 8)),
            "beyond the file",
        ),
        (
            "no signature",
            Box::new(|d| put(d, g.header + 44, 0, 4)),
            "signature symbol 0",
        ),
        (
            "signature past the table",
            Box::new(|d| put(d, g.header + 44, 1 << 30, 4)),
            "signature symbol",
        ),
        (
            "link not the symbol table",
            Box::new(|d| put(d, g.header + 40, 1, 4)),
            "sh_link",
        ),
        (
            "entry size",
            Box::new(|d| put(d, g.header + 56, 8, 8)),
            "entry size 8",
        ),
        (
            "SHF_GROUP with no group",
            Box::new(|d| {
                for o in &groups {
                    put(d, o.header + 4, object::elf::SHT_PROGBITS.into(), 4);
                }
            }),
            "no group lists it",
        ),
    ];
    let sel = Selection::all();
    for (what, corrupt, expect) in &cases {
        let mut d = good.clone();
        corrupt(&mut d);
        for r in [
            mantle_instr::rewrite_file(&d, "x", &sel, 0, ExitMode::Auto).map(|_| ()),
            mantle_instr::plan_file(&d, "x", &sel, 0, ExitMode::Auto).map(|_| ()),
        ] {
            let e = r.expect_err(what).to_string();
            assert!(e.contains(expect), "{what}: {e}");
        }
    }
    // A group with no flags (not COMDAT) is well-formed and kept.
    let mut plain = good.clone();
    put(&mut plain, g.table.start, 0, 4);
    let (out, _) = mantle_instr::rewrite_file(&plain, "x", &sel, 0, ExitMode::Auto).unwrap();
    let ours = groups_at(&out);
    assert_eq!(ours.len(), groups.len());
    let mut ranges: Vec<_> = groups.iter().map(|g| g.header..g.header + 64).collect();
    ranges.extend(groups.iter().map(|g| g.table.clone()));
    fuzz(&good, Some(&ranges));
    fuzz(&good, None);
}

/// defaults.c with every function behind a trampoline (the default exit):
/// the original and the rewritten program, built in one directory.
fn defaults_built() -> (Built, PathBuf, PathBuf) {
    let b = compile(
        "defaults.c",
        "cc",
        &["-O2", "-fno-inline", "-fno-optimize-sibling-calls"],
    );
    let data = std::fs::read(&b.obj).unwrap();
    let (bytes, report) =
        mantle_instr::rewrite_file(&data, "orig.o", &Selection::all(), 0, ExitMode::Auto).unwrap();
    assert_eq!(report.refused, 0, "{:#?}", report.functions);
    assert_eq!(exits(&report, "trampoline"), report.instrumented);
    let new_obj = b.dir.join("instr.o");
    std::fs::write(&new_obj, bytes).unwrap();
    std::fs::write(b.dir.join("map.tsv"), report.map_lines()).unwrap();
    let orig = link(&b, &[&b.obj], "orig", None);
    let new = link(&b, &[&new_obj], "instr", Some(&runtime()));
    (b, orig, new)
}

fn run_args(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(exe);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// With no hook set and no output asked for, the built-in tracer does not
/// run (it did, 26x on fib, for a profile nobody wrote): no frame is kept
/// for a call; with an output asked for, it runs and counts.
#[test]
fn no_hooks_no_output_runs_no_tracer() {
    let (b, _, new) = defaults_built();
    let o = run_args(&new, &["depth"], &[]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "depth 0\n");
    let prof = b.dir.join("prof.json");
    let map = b.dir.join("map.tsv");
    let o = run_args(
        &new,
        &["depth"],
        &[
            ("MANTLE_INSTR_OUT", prof.to_str().unwrap()),
            ("MANTLE_INSTR_MAP", map.to_str().unwrap()),
        ],
    );
    assert!(o.status.success(), "{o:?}");
    // main and depth_here are open.
    assert_eq!(String::from_utf8_lossy(&o.stdout), "depth 2\n");
    let calls = profile(&prof);
    assert!(
        calls.iter().any(|(_, n, c)| n == "depth_here" && *c == 1),
        "{calls:?}"
    );
    std::fs::remove_dir_all(&b.dir).unwrap();
}

/// A trace that reaches MANTLE_INSTR_TRACE_MAX ends with a marker event
/// that counts what was dropped, and the program warns at exit; under the
/// limit, neither.
#[test]
fn trace_limit_is_marked_and_warned() {
    let (b, _, new) = defaults_built();
    let trace = b.dir.join("trace.json");
    let t = trace.to_str().unwrap();
    // leaf 1000 times and main once: 1001 events.
    let o = run_args(
        &new,
        &["loop", "1000"],
        &[("MANTLE_INSTR_TRACE", t), ("MANTLE_INSTR_TRACE_MAX", "100")],
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "loop 1000\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("MANTLE_INSTR_TRACE_MAX=100") && err.contains("901 later events were dropped"),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    assert_eq!(ev.len(), 101);
    assert_eq!(ev.iter().filter(|e| e["ph"] == "X").count(), 100);
    let m = &ev[100];
    assert_eq!(m["ph"], "i");
    assert!(m["name"]
        .as_str()
        .unwrap()
        .contains("MANTLE_INSTR_TRACE_MAX"));
    assert_eq!(m["args"]["dropped"], 901);
    assert_eq!(m["args"]["limit"], 100);
    // Under the limit: no marker, no warning.
    let o = run_args(&new, &["loop", "1000"], &[("MANTLE_INSTR_TRACE", t)]);
    assert!(o.status.success() && o.stderr.is_empty(), "{o:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(v["traceEvents"].as_array().unwrap().len(), 1001);
    std::fs::remove_dir_all(&b.dir).unwrap();
}

/// Trampolines (the default exit) nest without a small fixed limit (they
/// aborted past 4,095): 100,000 deep on the main thread, with the tracer
/// and with no hook, and 1,000,000 deep on a thread with
/// a 1 GiB stack; the output is the original's and every call counted.
#[test]
fn trampolines_nest_a_million_deep() {
    let (b, orig, new) = defaults_built();
    let prof = b.dir.join("prof.json");
    let map = b.dir.join("map.tsv");
    let env = [
        ("MANTLE_INSTR_OUT", prof.to_str().unwrap()),
        ("MANTLE_INSTR_MAP", map.to_str().unwrap()),
    ];
    for (args, want) in [
        (&["deep", "100000"][..], 100_000u64),
        (&["tdeep", "1000000"][..], 1_000_000),
    ] {
        let a = run_args(&orig, args, &[]);
        assert!(a.status.success(), "{args:?} original: {a:?}");
        let n = run_args(&new, args, &[]);
        assert_eq!(
            (n.status.code(), &n.stdout),
            (a.status.code(), &a.stdout),
            "{args:?} no hooks: {}",
            String::from_utf8_lossy(&n.stderr)
        );
        let n = run_args(&new, args, &env);
        assert_eq!(
            (n.status.code(), &n.stdout),
            (a.status.code(), &a.stdout),
            "{args:?} tracer: {}",
            String::from_utf8_lossy(&n.stderr)
        );
        let calls = profile(&prof);
        let deep = calls.iter().find(|(_, n, _)| n == "deep").map(|c| c.2);
        assert_eq!(deep, Some(want + 1), "{args:?}: {calls:?}");
    }
    std::fs::remove_dir_all(&b.dir).unwrap();
}

/// Events of a Chrome trace that do not nest in the event enclosing them
/// on their thread (an exception left a frame open past its caller's end,
/// or closed it late): (name, name of the enclosing event).
fn nesting_violations(trace: &Path) -> (usize, Vec<(String, String)>) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();
    let mut by_tid: BTreeMap<u64, Vec<(f64, f64, String)>> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] != "X" {
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        by_tid.entry(e["tid"].as_u64().unwrap()).or_default().push((
            ts,
            ts + e["dur"].as_f64().unwrap(),
            e["name"].as_str().unwrap().to_string(),
        ));
    }
    // Times are printed in µs with 3 decimals: 2 ns of rounding.
    let eps = 0.002;
    let mut bad = Vec::new();
    let mut n = 0;
    for evs in by_tid.values_mut() {
        n += evs.len();
        evs.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<&(f64, f64, String)> = Vec::new();
        for e in evs.iter() {
            while stack
                .last()
                .is_some_and(|t| e.0 >= t.1 - eps && e.1 > t.1 + eps)
            {
                stack.pop();
            }
            if let Some(t) = stack.last() {
                if e.1 > t.1 + eps {
                    bad.push((e.2.clone(), t.2.clone()));
                }
            }
            stack.push(e);
        }
    }
    (n, bad)
}

/// C++ exceptions thrown through 10 instrumented levels (cleanups,
/// a rethrow, catches at two depths, 100 iterations): every function
/// behind a trampoline (they were refused, or given patched rets, in
/// objects that use exceptions), the same output, exact call counts, a
/// properly nested trace (200 violations in 100 iterations before), and
/// with ordinary and fast hooks every entry matched by one exit.
#[test]
fn cxx_exceptions_through_ten_trampolines() {
    for pie in [false, true] {
        let flags: &[&str] = if pie {
            &["-O2", "-fno-inline", "-fpie"]
        } else {
            &["-O2", "-fno-inline", "-fno-pie"]
        };
        let b = compile("cxx10.cpp", "c++", flags);
        let (a, n, calls, report) = instrument_as(&b, ExitMode::Auto);
        let own = own_counts(&a.stdout);
        for f in &report.functions {
            let counted = own.keys().any(|k| f.name.contains(k.as_str()));
            if counted && !f.name.contains(".cold") {
                assert!(
                    matches!(
                        f.outcome,
                        Outcome::Instrumented {
                            exit: "trampoline",
                            ..
                        }
                    ),
                    "pie {pie}: {} {:?}",
                    f.name,
                    f.outcome
                );
            }
        }
        assert_eq!((&a.stdout, a.code), (&n.stdout, n.code), "pie {pie}");
        for (name, c) in &own {
            let got: u64 = calls
                .iter()
                .filter(|(k, _)| k.contains(name.as_str()))
                .map(|(_, v)| v)
                .sum();
            assert_eq!(got, *c, "pie {pie}: calls of {name}: {calls:?}");
        }
        let trace = b.dir.join("trace.json");
        let map = b.dir.join("map.tsv");
        let r = run(
            &b.dir.join("instr"),
            &[("MANTLE_INSTR_TRACE", &trace), ("MANTLE_INSTR_MAP", &map)],
        );
        assert_eq!(r.stdout, a.stdout);
        let (events, bad) = nesting_violations(&trace);
        assert!(events > 900, "{events} events");
        assert!(
            bad.is_empty(),
            "pie {pie}: {} violations: {:?}",
            bad.len(),
            &bad[..bad.len().min(10)]
        );
        if !pie {
            check_hooks("cxx10.cpp", &b, false, true);
            check_hooks("cxx10.cpp", &b, true, true);
        }
        std::fs::remove_dir_all(&b.dir).unwrap();
    }
}

/// An object with inline trampolines links with the shared runtime too
/// (`-lmantle_instr_rt` finds the `.so` first): the library exports the
/// trampolines' TLS pointer, and the run counts what the static runtime's
/// run counts.
#[test]
fn inline_trampolines_link_with_the_shared_runtime() {
    let b = compile("basic.c", "cc", C_FLAGS);
    let (a, n, calls, _) = instrument_as(&b, ExitMode::Auto);
    assert_eq!((&a.stdout, a.code), (&n.stdout, n.code));
    assert!(!calls.is_empty());
    let lib = runtime().parent().unwrap().to_path_buf();
    let exe = b.dir.join("instr-shared");
    let mut c = Command::new(b.cc);
    c.arg(b.dir.join("instr.o"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lmantle_instr_rt", "-lpthread", "-lm"]);
    run_cc("instr-shared", &mut c);
    let prof = b.dir.join("prof-shared.json");
    let map = b.dir.join("map.tsv");
    let s = run(
        &exe,
        &[("MANTLE_INSTR_OUT", &prof), ("MANTLE_INSTR_MAP", &map)],
    );
    assert_eq!((&a.stdout, a.code), (&s.stdout, s.code));
    let shared: BTreeMap<String, u64> = profile(&prof)
        .into_iter()
        .map(|(_, name, calls)| (name, calls))
        .collect();
    assert_eq!(shared, calls);
}

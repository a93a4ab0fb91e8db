//! Integration tests with the real kernel: record → report on a real
//! workload, a process that exits during recording, the missing-PMU error
//! and the --fallback path (on any machine, through the fault seam), the
//! options refused before recording, and pprof output read by
//! `go tool pprof`.
//!
//! The tests that record need root, perf_event_open and eBPF: they are
//! ignored with that reason unless included (scripts/test.sh, as root), and
//! included without them they fail naming what is missing. The others
//! (options refused before recording, the missing-PMU error through the
//! fault seam) need nothing and run everywhere.

use mantle_prof::model::{render_text, ReportOpts};
use mantle_prof::record::{record, RecordOpts, Target};
use mantle_prof::{report, Error};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Fails the test unless this machine can record: root, software perf
/// events and BPF perf_event programs (mantle-testsupport's rule).
#[track_caller]
fn require_recording() {
    mantle_testsupport::require_root("recording (system-wide perf events and eBPF)");
    let r = mantle_sys::probe::probe_all();
    for (feature, what) in [
        ("perf_software", "software perf events"),
        ("prog_perf_event", "BPF perf_event programs"),
    ] {
        mantle_testsupport::require(what, r.has(feature), "to record");
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-prof-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `go` (for `go tool pprof`), or the test fails naming it.
#[track_caller]
fn require_go() -> &'static str {
    let go = ["go", "/usr/local/go/bin/go"].into_iter().find(|g| {
        Command::new(g)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    mantle_testsupport::require(
        "go (for `go tool pprof`; /usr/local/go/bin/go or on PATH)",
        go.is_some(),
        "to read the profile back",
    );
    go.unwrap()
}

/// Writes the report as pprof in `dir` and returns what `go tool pprof
/// FLAG` prints of it (the test fails if go fails).
fn go_pprof(go: &str, flag: &str, r: &mantle_prof::Report, dir: &Path) -> String {
    let p = dir.join("p.pb.gz");
    report::write_pprof(r, &p).unwrap();
    let out = Command::new(go)
        .args(["tool", "pprof", flag])
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The paper's Multiply workload, built from bench/prof/multiply.c.
fn multiply(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof/multiply.c");
    let out = dir.join("multiply");
    mantle_testsupport::build::run_cc(
        "bench/prof/multiply.c",
        Command::new("cc")
            .args(["-O0", "-g", "-o"])
            .arg(&out)
            .arg(&src),
    );
    out
}

fn opts(dir: &Path, target: Target) -> RecordOpts {
    RecordOpts {
        target,
        freq: Some(5000),
        output: dir.join("s"),
        status: false,
        ..Default::default()
    }
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn record_then_report_multiply() {
    require_recording();
    let d = tmpdir("mult");
    let bin = multiply(&d);
    let s = record(&opts(
        &d,
        Target::Command(vec![bin.display().to_string(), "8000".into()]),
    ))
    .expect("record");
    assert_eq!(s.command_status, Some(0));
    assert!(s.meta.samples > 100, "{} samples", s.meta.samples);
    assert!(d.join("s/meta.json").exists() && d.join("s/profile.tsv").exists());
    // the session holds kernel addresses: closed to other users (nobody
    // cannot list or read it), as perf.data is
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.join("s")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "session directory mode {mode:o}");
    let nobody = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat"])
        .arg(d.join("s/kallsyms.gz"))
        .output()
        .expect("setpriv");
    assert!(!nobody.status.success(), "nobody read kallsyms.gz");
    let r = report::report(&d.join("s"), &ReportOpts::default()).expect("report");
    let top = &r.symbols[0];
    assert_eq!(top.symbol, "slow_multiply", "{}", render_text(&r));
    assert!(top.percent > 80.0, "{}", render_text(&r));
    assert!(r.symbols.iter().any(|s| s.symbol == "main"));
    assert!(r
        .components
        .iter()
        .any(|c| c.component.starts_with("multiply[") && c.percent > 80.0));
    assert_eq!(r.total, r.symbols.iter().map(|s| s.samples).sum::<u64>());
    // text and JSON both render
    let text = render_text(&r);
    assert!(text.contains("Per component:") && text.contains("Per image:"));
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["symbols"][0]["symbol"], "slow_multiply");
    // flame graph
    report::write_flame(&r, &d.join("f.svg")).unwrap();
    let svg = std::fs::read_to_string(d.join("f.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("slow_multiply"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn process_exiting_during_recording_still_resolves() {
    require_recording();
    let d = tmpdir("exit");
    let bin = multiply(&d);
    // the multiply process exits well before the recording ends
    let script = format!("{} 4000; sleep 1.5", bin.display());
    let s = record(&opts(
        &d,
        Target::Command(vec!["sh".into(), "-c".into(), script]),
    ))
    .expect("record");
    assert_eq!(s.command_status, Some(0));
    let procs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("s/processes.json")).unwrap()).unwrap();
    let m = procs
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "multiply")
        .expect("multiply in processes.json");
    assert_eq!(m["exited"], true);
    let r = report::report(
        &d.join("s"),
        &ReportOpts {
            comm: Some("multiply".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.symbols[0].symbol, "slow_multiply", "{}", render_text(&r));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Every hardware event fails with ENOENT, as on a machine without a PMU
/// (the library's fault seam), so the missing-PMU paths are tested on
/// every machine, PMU or not.
fn without_pmu(o: &mut RecordOpts) {
    o.faults.hardware_errno = Some(libc::ENOENT);
}

#[test]
fn hardware_event_without_pmu_is_an_error_naming_the_fallback() {
    // no root needed: the event is chosen before anything is opened
    let d = tmpdir("pmu");
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.event = "cycles".into();
    without_pmu(&mut o);
    let e = record(&o).expect_err("cycles without a PMU");
    assert!(matches!(e, Error::NoPmu(ref ev) if ev == "cycles"), "{e}");
    assert!(e.to_string().contains("--fallback cpu-clock"), "{e}");
    // a fallback that needs a PMU as well: said so, with what to use
    o.fallback = Some("instructions".into());
    let e = record(&o).expect_err("instructions as the fallback without a PMU");
    assert!(
        matches!(e, Error::FallbackNoPmu { ref event, ref fallback }
            if event == "cycles" && fallback == "instructions"),
        "{e}"
    );
    assert!(e.to_string().contains("--fallback cpu-clock"), "{e}");
    assert!(!d.join("s").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn hardware_event_without_pmu_falls_back_and_says_so() {
    require_recording();
    let d = tmpdir("pmu-fallback");
    let bin = multiply(&d);
    let mut o = opts(
        &d,
        Target::Command(vec![bin.display().to_string(), "3000".into()]),
    );
    o.event = "cycles".into();
    o.fallback = Some("cpu-clock".into());
    without_pmu(&mut o);
    let s = record(&o).expect("record with fallback");
    assert_eq!(s.meta.event, "cpu-clock");
    assert_eq!(s.meta.fallback_from.as_deref(), Some("cycles"));
    assert!(s.render().contains("fallback for cycles"), "{}", s.render());
    let r = report::report(&d.join("s"), &ReportOpts::default()).unwrap();
    let text = render_text(&r);
    assert!(text.contains("cpu-clock (fallback for cycles)"), "{text}");
    assert!(
        text.contains("warning: event cycles is not available here"),
        "{text}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn rate_above_the_kernel_maximum_is_refused() {
    require_recording();
    let max = mantle_prof::record::max_sample_rate()
        .expect("kernel.perf_event_max_sample_rate is unreadable: the limit this test checks");
    let d = tmpdir("rate");
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.freq = Some(max as u64 + 1);
    let e = record(&o).expect_err("rate above max");
    assert!(matches!(e, Error::RateTooHigh { .. }), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open, eBPF and go (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn pprof_output_is_read_by_go_tool_pprof() {
    require_recording();
    let go = require_go();
    let d = tmpdir("pprof");
    let bin = multiply(&d);
    let mut o = opts(
        &d,
        Target::Command(vec![bin.display().to_string(), "5000".into()]),
    );
    o.duration = Some(Duration::from_secs(30));
    record(&o).expect("record");
    let r = report::report(&d.join("s"), &ReportOpts::default()).unwrap();
    let text = go_pprof(go, "-top", &r, &d);
    assert!(text.contains("slow_multiply"), "{text}");
    // the top line is slow_multiply
    let first = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or("");
    assert!(first.contains("slow_multiply"), "{text}");
    // source lines (issue 33): -list prints multiply.c's lines with their
    // samples, the loops of slow_multiply (lines 8 to 10) holding them
    // (from the session's directory: pprof guesses a prefix to trim from
    // the basename of its working directory, crates/prof's "prof" here)
    let out = Command::new(go)
        .args(["tool", "pprof", "-list", "^slow_multiply$"])
        .arg(d.join("p.pb.gz"))
        .current_dir(&d)
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{list}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        list.lines()
            .any(|l| l.starts_with("ROUTINE") && l.ends_with("bench/prof/multiply.c")),
        "{list}"
    );
    let flat = |n: u32| -> Option<String> {
        let l = list.lines().find(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|c| c.starts_with(&format!("{n}:")))
        })?;
        Some(l.split_whitespace().next()?.to_string())
    };
    assert!(list.contains("z = z + y;"), "{list}");
    let hot = (8..=10)
        .filter(|&n| flat(n).is_some_and(|f| f != "."))
        .count();
    assert!(hot >= 2, "{list}");
    // line 7 (declarations only) has no code
    assert_eq!(flat(7).as_deref(), Some("."), "{list}");
    // the profile itself: the function's file and first line, and the
    // program's mapping as it was in the process, with its build ID
    let pb = mantle_prof::pprof::build(&r);
    let st = |i: i64| pb.string_table[i as usize].as_str();
    let f = pb
        .function
        .iter()
        .find(|f| st(f.name) == "slow_multiply")
        .expect("slow_multiply");
    assert!(st(f.filename).ends_with("bench/prof/multiply.c"));
    assert_eq!(f.start_line, 6);
    let m = pb
        .mapping
        .iter()
        .find(|m| st(m.filename) == bin.display().to_string())
        .expect("the program's mapping");
    assert!(
        m.memory_start > 0 && m.memory_limit > m.memory_start,
        "{m:?}"
    );
    assert_eq!(
        Some(st(m.build_id).to_string()),
        mantle_prof::symbols::build_id(&bin)
    );
    assert!(m.has_filenames && m.has_line_numbers);
    let in_map = pb
        .location
        .iter()
        .filter(|l| l.mapping_id == m.id)
        .all(|l| (m.memory_start..m.memory_limit).contains(&l.address));
    assert!(in_map, "a location of the program outside its mapping");
    // annotate: slow_multiply's own samples per source line and per
    // instruction, the loops' lines holding most, each share summing up
    use mantle_prof::annotate::{annotate, AnnotateOpts};
    let v = annotate(
        &d.join("s"),
        &ReportOpts::default(),
        "slow_multiply",
        AnnotateOpts::default(),
    )
    .unwrap();
    assert_eq!(v.len(), 1);
    let a = &v[0];
    let own = r
        .symbols
        .iter()
        .find(|s| s.symbol == "slow_multiply")
        .unwrap();
    assert_eq!(a.samples, own.samples);
    let loops: u64 = a
        .lines
        .iter()
        .filter(|l| (8..=10).contains(&l.line))
        .map(|l| l.samples)
        .sum();
    assert!(
        loops * 10 >= a.samples * 9,
        "{}",
        mantle_prof::annotate::render(a)
    );
    let l9 = a.lines.iter().find(|l| l.line == 9).expect("line 9");
    assert_eq!(l9.text.as_deref().map(str::trim), Some("z = z + y;"));
    assert_eq!(a.lines.iter().map(|l| l.samples).sum::<u64>(), a.samples);
    assert!(a.instructions.len() > 5);
    assert_eq!(a.instructions.last().unwrap().text, "ret");
    assert_eq!(
        a.instructions.iter().map(|i| i.samples).sum::<u64>() + a.outside,
        a.samples
    );
    assert_eq!(a.outside, 0, "{}", mantle_prof::annotate::render(a));
    assert!(a
        .instructions
        .iter()
        .all(|i| i.file.as_deref().is_some_and(|f| f.ends_with("multiply.c"))));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn vdso_samples_resolve_through_the_session_copy() {
    require_recording();
    let d = tmpdir("vdso");
    std::fs::write(
        d.join("vd.c"),
        "#include <time.h>\nint main(void){struct timespec t; long s=0; for(long i=0;i<8000000;i++){clock_gettime(CLOCK_MONOTONIC,&t); s+=t.tv_nsec;} return s==1;}\n",
    )
    .unwrap();
    mantle_testsupport::build::run_cc(
        "vd.c",
        Command::new("cc")
            .args(["-O2", "-o"])
            .arg(d.join("vd"))
            .arg(d.join("vd.c")),
    );
    record(&opts(
        &d,
        Target::Command(vec![d.join("vd").display().to_string()]),
    ))
    .unwrap();
    assert!(d.join("s/vdso.so").exists());
    let r = report::report(&d.join("s"), &ReportOpts::default()).unwrap();
    assert!(
        r.symbols
            .iter()
            .any(|s| s.image == "[vdso]" && s.symbol.contains("clock_gettime") && s.percent > 20.0),
        "{}",
        render_text(&r)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn zero_duration_is_a_usage_error() {
    let d = tmpdir("dur0");
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.duration = Some(Duration::ZERO);
    let e = record(&o).expect_err("--duration 0");
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert!(e.to_string().contains("--duration"), "{e}");
    assert!(!d.join("s").exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--stack-size`: a multiple of 8 from 512 to 57344, and only with
/// `--stacks dwarf`; refused before recording (no root needed).
#[test]
fn stack_size_is_checked_before_recording() {
    let d = tmpdir("stacksize");
    for (size, stacks, ok) in [
        (511, mantle_prof::Stacks::Dwarf, false),
        (512, mantle_prof::Stacks::Dwarf, true),
        (8196, mantle_prof::Stacks::Dwarf, false),
        (57344, mantle_prof::Stacks::Dwarf, true),
        (57352, mantle_prof::Stacks::Dwarf, false),
        (16384, mantle_prof::Stacks::Perf, false),
    ] {
        let mut o = opts(&d, Target::Command(vec!["true".into()]));
        o.stacks = stacks;
        o.stack_copy = size;
        match record(&o) {
            Err(Error::Invalid(m)) => assert!(!ok, "{size} {stacks:?}: {m}"),
            // accepted: refused later for another reason (not root) or recorded
            _ => assert!(ok, "{size} {stacks:?} accepted"),
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn fallback_equal_to_the_event_is_a_usage_error() {
    let d = tmpdir("fbsame");
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.event = "cycles".into();
    o.fallback = Some("cpu-cycles".into()); // an alias of cycles
    let e = record(&o).expect_err("fallback = event");
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let m = e.to_string();
    assert!(m.contains("--fallback") && m.contains("cpu-clock"), "{m}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_existing_session_is_not_replaced() {
    let d = tmpdir("exists");
    std::fs::create_dir_all(d.join("s")).unwrap();
    std::fs::write(d.join("s/meta.json"), b"{\"old\": true}").unwrap();
    let o = opts(&d, Target::Command(vec!["true".into()]));
    let e = record(&o).expect_err("-o EXISTING");
    assert!(e.to_string().contains("--force"), "{e}");
    assert_eq!(
        std::fs::read(d.join("s/meta.json")).unwrap(),
        b"{\"old\": true}"
    );
    // --force never removes what is not a session
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.output = d.join("mine");
    o.force = true;
    std::fs::create_dir_all(d.join("mine")).unwrap();
    std::fs::write(d.join("mine/notes.txt"), b"keep").unwrap();
    let e = record(&o).expect_err("--force on a directory that is not a session");
    assert!(matches!(e, Error::NotASession(_)), "{e}");
    assert_eq!(std::fs::read(d.join("mine/notes.txt")).unwrap(), b"keep");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn force_replaces_a_whole_session() {
    require_recording();
    let d = tmpdir("force");
    std::fs::create_dir_all(d.join("s/jit")).unwrap();
    std::fs::write(d.join("s/meta.json"), b"{\"old\": true}").unwrap();
    std::fs::write(d.join("s/jit/perf-1.map"), b"stale").unwrap();
    let mut o = opts(&d, Target::Command(vec!["true".into()]));
    o.force = true;
    record(&o).expect("record --force");
    // the new session, and nothing left of the old one
    mantle_prof::session::read_session(&d.join("s")).expect("a valid session");
    assert!(!d.join("s/jit/perf-1.map").exists());
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("s")],
        "temporary directories left"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// bench/prof/callgraph.c (main -> a -> b, main -> c -> b) with frame
/// pointers, calling lib_work of bench/prof/striplib.c built as a stripped
/// library (libstrip.so, found through the rpath).
fn callgraph(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof");
    let lib = dir.join("libstrip.so");
    mantle_testsupport::build::run_cc(
        "bench/prof/striplib.c",
        Command::new("cc")
            .args([
                "-O1",
                "-fno-omit-frame-pointer",
                "-fno-inline",
                "-shared",
                "-fPIC",
                "-s",
                "-o",
            ])
            .arg(&lib)
            .arg(src.join("striplib.c")),
    );
    let out = dir.join("callgraph");
    mantle_testsupport::build::run_cc(
        "bench/prof/callgraph.c",
        Command::new("cc")
            .args([
                "-O1",
                "-fno-omit-frame-pointer",
                "-fno-inline",
                "-g",
                "-DWITH_LIB",
                "-o",
            ])
            .arg(&out)
            .arg(src.join("callgraph.c"))
            .arg(format!("-L{}", dir.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .arg("-lstrip"),
    );
    out
}

/// Records `bin ROUNDS` at 2 000 Hz with `stacks` (replacing the session
/// in `dir`) and reports the samples of `comm`.
fn record_stacks(
    dir: &Path,
    bin: &Path,
    rounds: &str,
    stacks: mantle_prof::Stacks,
    comm: &str,
) -> mantle_prof::Report {
    let mut o = opts(
        dir,
        Target::Command(vec![bin.display().to_string(), rounds.into()]),
    );
    o.freq = Some(2000);
    o.stacks = stacks;
    o.force = true;
    record(&o).expect("record");
    report::report(
        &dir.join("s"),
        &ReportOpts {
            comm: Some(comm.into()),
            ..Default::default()
        },
    )
    .expect("report")
}

/// The rows of a call graph as (symbol, samples).
fn rows(v: &[mantle_prof::model::SymRow]) -> Vec<(&str, u64)> {
    v.iter().map(|s| (s.symbol.as_str(), s.samples)).collect()
}

#[test]
#[ignore = "needs root, perf_event_open, eBPF and go (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn stacks_of_a_frame_pointer_program_are_exact() {
    use mantle_prof::model::call_graph;
    require_recording();
    let go = require_go();
    let d = tmpdir("stacks");
    let bin = callgraph(&d);
    for stacks in [mantle_prof::Stacks::Perf, mantle_prof::Stacks::Bpf] {
        let r = record_stacks(&d, &bin, "1500", stacks, "callgraph");
        let ctx = format!("{stacks:?}\n{}", render_text(&r));
        assert!(r.stacks, "{ctx}");
        // a stack or two per run finds the map's allocator cache empty
        // (docs/prof.md, "Call stacks"): counted, and few
        assert!(r.meta.lost_stacks * 100 <= r.meta.samples, "{ctx}");
        // exact: b is called by a and c only, a and c by main only, and
        // every sample of b is under one of them -- but for the samples
        // that land in a function's first instructions, before it has
        // pushed its frame pointer: there the walk skips its caller (perf
        // -g does the same). Those are a few per thousand.
        let few = |other: u64, of: u64| other * 100 <= of.max(100);
        let b = call_graph(&r, "b").expect("b in the stacks");
        let callers = rows(&b.callers);
        let n = |v: &[(&str, u64)], s: &str| v.iter().find(|r| r.0 == s).map_or(0, |r| r.1);
        let (ab, cb) = (n(&callers, "a"), n(&callers, "c"));
        assert!(few(b.inclusive - ab - cb, b.inclusive), "{callers:?} {ctx}");
        for f in ["a", "c"] {
            let g = call_graph(&r, f).unwrap();
            let main = n(&rows(&g.callers), "main");
            assert!(
                few(g.inclusive - main, g.inclusive),
                "{f}: {:?} {ctx}",
                g.callers
            );
            let callees = rows(&g.callees);
            let known = n(&callees, "b") + n(&callees, "spin");
            let all: u64 = callees.iter().map(|c| c.1).sum();
            assert!(few(all - known, g.inclusive), "{f}: {callees:?}");
            assert_eq!(g.self_samples + all, g.inclusive);
        }
        let lib = call_graph(&r, "lib_work").expect("lib_work in the stacks");
        let main = n(&rows(&lib.callers), "main");
        assert!(few(lib.inclusive - main, lib.inclusive), "{ctx}");
        // the counts: a->b 40%, c->b 30% of a+c's time (callgraph.c); 4/7 of b
        // from a, within sampling noise (hundreds of samples)
        let share = ab as f64 / (ab + cb) as f64;
        assert!(
            (share - 4.0 / 7.0).abs() < 0.06,
            "a->b share {share:.3}: {ctx}"
        );
        let inc = |s: &str| call_graph(&r, s).map_or(0, |g| g.inclusive) as f64;
        let (a, c) = (inc("a"), inc("c"));
        assert!((a / (a + c) - 0.5).abs() < 0.05, "a {a} c {c}: {ctx}");
        assert!((inc("b") / (a + c) - 0.7).abs() < 0.05, "{ctx}");
        // the stripped library: its nameless code listed per function
        // (hidden_one, hidden_two: one row each, not one per address)
        let stripped: Vec<&str> = r
            .symbols
            .iter()
            .filter(|s| s.image.ends_with("/libstrip.so"))
            .map(|s| s.symbol.as_str())
            .collect();
        // (lib_work, the one export, keeps its name from .dynsym)
        let nameless = stripped
            .iter()
            .filter(|s| s.starts_with("[libstrip.so+0x"))
            .count();
        assert!((2..=3).contains(&nameless), "{stripped:?}: {ctx}");
        assert!(
            stripped
                .iter()
                .all(|s| s.starts_with("[libstrip.so+0x") || *s == "lib_work"),
            "{stripped:?}"
        );
        assert!(!r.symbols.iter().any(|s| s.symbol == "[unknown]"), "{ctx}");
    }
    let r = report::report(&d.join("s"), &ReportOpts::default()).unwrap();
    // pprof: the stacks, read back by go tool pprof -traces
    let text = go_pprof(go, "-traces", &r, &d);
    assert!(text.starts_with("File: callgraph"), "{text}");
    let traces: Vec<Vec<&str>> = text
        .split("-----------+")
        .map(|t| {
            t.lines()
                .filter(|l| !l.contains(':') && !l.starts_with('-') && !l.trim().is_empty())
                .map(|l| l.split_whitespace().last().unwrap_or(""))
                .collect()
        })
        .collect();
    for want in [["spin", "b", "a", "main"], ["spin", "b", "c", "main"]] {
        assert!(
            traces.iter().any(|t| t.len() >= 4 && t[..4] == want),
            "no trace {want:?} in\n{text}"
        );
    }
    // -svg (graphviz draws it): the call graph's nodes and their edges
    mantle_testsupport::require(
        "graphviz's dot (scripts/setup.sh installs it)",
        Command::new("dot")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "for go tool pprof -svg",
    );
    let svg = go_pprof(go, "-svg", &r, &d);
    assert!(svg.contains("<svg"), "{svg}");
    // edges are titled "caller &#45;&gt; callee (time)"
    for edge in ["main &#45;&gt; a ", "a &#45;&gt; b ", "c &#45;&gt; b "] {
        assert!(svg.contains(edge), "no edge {edge} in go tool pprof -svg");
    }
    // -tree: b's callers are a and c
    let tree = go_pprof(go, "-tree", &r, &d);
    let b_node = tree
        .split("-------+")
        .find(|n| n.lines().any(|l| l.trim_end().ends_with("| b")))
        .unwrap_or_else(|| panic!("no node b in\n{tree}"));
    for caller in ["|   a", "|   c"] {
        assert!(
            b_node.contains(caller),
            "{caller} not a caller of b in\n{b_node}"
        );
    }
    // flame graph: main, a, b stacked (depth > 1)
    report::write_flame(&r, &d.join("f.svg")).unwrap();
    let svg = std::fs::read_to_string(d.join("f.svg")).unwrap();
    let depth = r
        .folded()
        .iter()
        .map(|(l, _)| l.split(';').count())
        .max()
        .unwrap();
    assert!(depth >= 5, "{:?}", r.folded());
    for f in ["main", "a", "b", "c", "spin"] {
        assert!(
            svg.contains(&format!("<title>{f} (")),
            "{f} not in the flame graph"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// bench/prof/callgraph.c built as Debian builds programs: -O2 without
/// frame pointers (no inlining and no tail calls, so that the call
/// structure stays the known one).
fn callgraph_nofp(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof/callgraph.c");
    let out = dir.join("callgraph-nofp");
    mantle_testsupport::build::run_cc(
        "bench/prof/callgraph.c",
        Command::new("cc")
            .args([
                "-O2",
                "-fomit-frame-pointer",
                "-fno-inline",
                "-fno-optimize-sibling-calls",
                "-o",
            ])
            .arg(&out)
            .arg(&src),
    );
    out
}

/// Inclusive samples of a function (0 when it is in no stack).
fn inclusive(r: &mantle_prof::Report, f: &str) -> u64 {
    mantle_prof::model::call_graph(r, f).map_or(0, |g| g.inclusive)
}

/// Without frame pointers, `--stacks dwarf` still finds every caller
/// (main -> a -> b, main -> c -> b, with the known shares), where the
/// frame-pointer walk of `--stacks perf` loses them.
#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn dwarf_stacks_of_a_program_without_frame_pointers() {
    use mantle_prof::model::call_graph;
    require_recording();
    let d = tmpdir("dwarf");
    let bin = callgraph_nofp(&d);
    let rec = |stacks| record_stacks(&d, &bin, "1500", stacks, "callgraph-nofp");
    let r = rec(mantle_prof::Stacks::Dwarf);
    let ctx = render_text(&r);
    assert_eq!(r.meta.stacks, "dwarf");
    let u = r.meta.unwind.expect("unwind counters in meta.json");
    assert!(u.stacks >= r.total * 9 / 10, "{u:?} {ctx}");
    assert!(u.truncated * 100 <= u.stacks, "{u:?}");
    assert!(u.cost_ns.n > 0 && u.cost_p99_ns >= u.cost_p50_ns, "{u:?}");
    let n = |v: &[(&str, u64)], s: &str| v.iter().find(|r| r.0 == s).map_or(0, |r| r.1);
    // every sample of the program is under main, and main under libc's start
    let main = inclusive(&r, "main");
    assert!(
        main * 100 >= r.total * 99,
        "main {main} of {}: {ctx}",
        r.total
    );
    let b = call_graph(&r, "b").expect("b in the stacks");
    let callers = rows(&b.callers);
    let (ab, cb) = (n(&callers, "a"), n(&callers, "c"));
    assert_eq!(ab + cb, b.inclusive, "{callers:?} {ctx}");
    for f in ["a", "c"] {
        let g = call_graph(&r, f).unwrap();
        assert_eq!(n(&rows(&g.callers), "main"), g.inclusive, "{f}: {ctx}");
    }
    // the shares: a and c half each, b 70 % of them, 4/7 of b from a
    let (a, c) = (inclusive(&r, "a") as f64, inclusive(&r, "c") as f64);
    assert!((a / (a + c) - 0.5).abs() < 0.05, "a {a} c {c}: {ctx}");
    assert!((b.inclusive as f64 / (a + c) - 0.7).abs() < 0.05, "{ctx}");
    let share = ab as f64 / (ab + cb) as f64;
    assert!((share - 4.0 / 7.0).abs() < 0.06, "a->b {share:.3}: {ctx}");
    // the same program with frame-pointer stacks: a, b and c are missing
    // from most stacks (what docs/prof.md says is lost)
    let fp = rec(mantle_prof::Stacks::Perf);
    let found = inclusive(&fp, "a") + inclusive(&fp, "c");
    assert!(
        found * 2 < fp.total,
        "frame-pointer stacks found a or c in {found} of {} samples: {}",
        fp.total,
        render_text(&fp)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// A stripped program whose symbols were split off into a debug file
/// (objcopy --only-keep-debug, strip): named through DIR/.build-id/, and
/// listed per address without it.
#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn split_debug_file_names_a_stripped_program() {
    require_recording();
    let d = tmpdir("debugfile");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof/callgraph.c");
    let bin = d.join("callgraph");
    mantle_testsupport::build::run_cc(
        "bench/prof/callgraph.c",
        Command::new("cc")
            .args(["-O1", "-fno-omit-frame-pointer", "-fno-inline", "-g"])
            .args(["-Wl,--build-id", "-o"])
            .arg(&bin)
            .arg(&src),
    );
    let id = mantle_prof::symbols::build_id(&bin).expect("a build ID");
    let rel = mantle_prof::debugfile::build_id_path(&id).unwrap();
    let dbg = d.join("dbg");
    std::fs::create_dir_all(dbg.join(&rel).parent().unwrap()).unwrap();
    let run = |cmd: &str, args: &[&std::ffi::OsStr]| {
        let st = Command::new(cmd).args(args).status().expect(cmd);
        assert!(st.success(), "{cmd} {args:?}");
    };
    let debug = dbg.join(&rel);
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            bin.as_os_str(),
            debug.as_os_str(),
        ],
    );
    run("strip", &["--strip-all".as_ref(), bin.as_os_str()]);
    record_stacks(&d, &bin, "600", mantle_prof::Stacks::Perf, "callgraph");
    let rep = |dirs: Vec<PathBuf>| {
        report::report(
            &d.join("s"),
            &ReportOpts {
                comm: Some("callgraph".into()),
                debug_dirs: Some(dirs),
                ..Default::default()
            },
        )
        .unwrap()
    };
    let names = |r: &mantle_prof::Report| -> Vec<String> {
        r.symbols
            .iter()
            .filter(|s| s.image.ends_with("/callgraph"))
            .map(|s| s.symbol.clone())
            .collect()
    };
    // with the debug file: the static spin and the call graph by name
    let with = rep(vec![dbg.clone()]);
    let n = names(&with);
    assert!(n.iter().any(|s| s == "spin"), "{n:?}");
    for f in ["main", "a", "b", "c"] {
        assert!(inclusive(&with, f) > 0, "{f}: {}", render_text(&with));
    }
    // without it: nameless code, one row per function (.eh_frame_hdr),
    // not per address, no "[unknown]" row: the self time (nearly all in
    // spin) in at most one row per function of the program (spin, a, b,
    // c, main), and the stacks' functions distinct (spin, b, a, c, main)
    let without = rep(vec![]);
    let n = names(&without);
    assert!(
        n.iter().all(|s| s.starts_with("[callgraph+0x")) && (1..=5).contains(&n.len()),
        "{n:?}"
    );
    let stacked = without
        .inclusive
        .iter()
        .filter(|s| s.image.ends_with("/callgraph") && s.symbol.starts_with("[callgraph+0x"))
        .count();
    assert!(stacked >= 4, "{}", render_text(&without));
    assert!(!n.iter().any(|s| s == "spin" || s == "[unknown]"), "{n:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// A program whose samples are 250 frames deep (frame pointers): `deep`
/// recursing 249 times, then spinning.
fn deep(dir: &Path) -> PathBuf {
    let src = dir.join("deep.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) static void spin(void) {\n\
         \tvolatile long x = 0;\n\
         \tfor (long i = 0; i < 400000000L; i++) x += i;\n}\n\
         __attribute__((noinline)) void deep(int n) {\n\
         \tif (n > 1) deep(n - 1); else spin();\n\
         \t__asm__ volatile(\"\");\n}\n\
         int main(void) { deep(249); return 0; }\n",
    )
    .unwrap();
    let out = dir.join("deep");
    mantle_testsupport::build::run_cc(
        "deep.c",
        Command::new("cc")
            .args(["-O1", "-fno-omit-frame-pointer", "-fno-inline", "-o"])
            .arg(&out)
            .arg(&src),
    );
    out
}

/// The most frames (the leaf and its callers) of any user-mode sample.
fn deepest(r: &mantle_prof::Report) -> usize {
    let g = &r.graph;
    g.rows
        .iter()
        .filter(|row| row.mode == mantle_prof::model::Mode::User)
        .map(|row| 1 + g.callers(row.stack).len())
        .max()
        .unwrap_or(0)
}

/// The stack depth follows kernel.perf_event_max_stack (read, never
/// written: the kernel refuses a change, EBUSY, while any callchain event
/// is open, which on a shared machine is most of the time; the raised
/// case is `host::stack_limit`'s unit test). At the default 127:
/// `--stacks bpf` keeps 127 user frames of a 254-frame stack, as `perf
/// record -g` does; `--stacks perf` keeps 126, because bpf_get_stack
/// copies the perf core's callchain with its PERF_CONTEXT_USER marker and
/// clamps the copy to the sysctl, marker included (kernel/bpf/stackmap.c);
/// the perf-ring path (a recorder without CAP_BPF) keeps 127.
#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it)"]
fn stack_depth_follows_perf_event_max_stack() {
    require_recording();
    let d = tmpdir("depth");
    let bin = deep(&d);
    let limit: usize = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rec = |unprivileged: bool, stacks: mantle_prof::Stacks| {
        let mut o = opts(&d, Target::Command(vec![bin.display().to_string()]));
        o.stacks = stacks;
        o.freq = Some(1000);
        o.force = true;
        if unprivileged {
            o.faults.privilege = Some(mantle_prof::record::Privilege {
                caps: 0,
                initial_ns: true,
                paranoid: Some(2),
            });
        }
        record(&o).expect("record");
        report::report(
            &d.join("s"),
            &ReportOpts {
                comm: Some("deep".into()),
                ..Default::default()
            },
        )
        .expect("report")
    };
    // the stack: spin, deep x249, main, and libc's two and _start
    let whole = 254;
    let kept = limit.min(127);
    let r = rec(false, mantle_prof::Stacks::Bpf);
    assert_eq!(r.meta.max_stack, Some(kept as u16));
    assert_eq!(deepest(&r), kept, "{}", render_text(&r));
    let warned = r
        .caveats
        .iter()
        .any(|c| c.contains("kernel.perf_event_max_stack is"));
    assert_eq!(warned, limit > 127, "{:?}", r.caveats);
    let r = rec(false, mantle_prof::Stacks::Perf);
    assert_eq!(deepest(&r), kept - 1, "{}", render_text(&r));
    let r = rec(true, mantle_prof::Stacks::Perf);
    assert_eq!(r.meta.sample_path.as_deref(), Some("perf-ring"));
    assert!(r.meta.user_only);
    let n = deepest(&r);
    assert!(
        (whole.min(limit) - 3..=whole.min(limit)).contains(&n),
        "{n}: {}",
        render_text(&r)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified
/// beside v1 trees), from /proc/self/mounts.
fn cgroup2_root() -> PathBuf {
    let m = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = m
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1]));
    mantle_testsupport::require("cgroup v2", root.is_some(), "to record a cgroup");
    root.unwrap()
}

/// Removes a scratch cgroup (after its processes are gone) when dropped.
struct Scratch(PathBuf, Vec<std::process::Child>);
impl Drop for Scratch {
    fn drop(&mut self) {
        for c in &mut self.1 {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `record --cgroup DIR` samples the tasks of that cgroup only: a
/// program running inside a scratch cgroup is in the report, the same
/// program running outside it under another name is not, and the
/// session's target names the cgroup.
#[test]
#[ignore = "needs root, perf_event_open, eBPF and cgroup v2 (scripts/test.sh runs it)"]
fn a_cgroup_is_recorded_and_nothing_outside_it() {
    require_recording();
    let d = tmpdir("cgroup");
    let bin = callgraph(&d);
    let outside = d.join("outsider");
    std::fs::copy(&bin, &outside).unwrap();
    let cg = cgroup2_root().join(format!("mantle-prof-test-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap();
    let mut scratch = Scratch(cg.clone(), Vec::new());
    let inside = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} 100000",
            cg.display(),
            bin.display()
        ))
        .spawn()
        .unwrap();
    scratch.1.push(inside);
    scratch
        .1
        .push(Command::new(&outside).arg("100000").spawn().unwrap());
    // the shell has moved itself in before its exec
    std::thread::sleep(Duration::from_millis(300));
    let mut o = opts(&d, Target::Cgroup(cg.clone()));
    o.duration = Some(Duration::from_secs(2));
    let s = record(&o).expect("record");
    assert!(
        s.meta.target.contains(&cg.display().to_string()),
        "{}",
        s.meta.target
    );
    let r = report::report(&d.join("s"), &ReportOpts::default()).expect("report");
    let ctx = render_text(&r);
    let comp = |name: &str| {
        r.components
            .iter()
            .filter(|c| c.component.starts_with(&format!("{name}[")))
            .map(|c| c.samples)
            .sum::<u64>()
    };
    assert!(comp("callgraph") > 200, "{ctx}");
    assert_eq!(comp("outsider"), 0, "{ctx}");
    drop(scratch);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Two scratch cgroups (this machine's PID 1 is not systemd, so no
/// `systemd-run --scope`: a scope is such a cgroup, made by systemd),
/// each running a different busy program, under a parent recorded with
/// `--cgroup` (as a host records its containers), on each way samples
/// travel: the eBPF sample path (bpf_get_current_cgroup_id),
/// the perf ring with PERF_SAMPLE_CGROUP (`--stacks dwarf`), and the perf
/// ring with the /proc fallback (the fault seam: as on a kernel without
/// PERF_SAMPLE_CGROUP). `--by-cgroup` shows both paths, each with its
/// own program and that program's function, and the session names the
/// source; the pprof profile labels samples with the cgroup's path.
#[test]
#[ignore = "needs root, perf_event_open, eBPF and cgroup v2 (scripts/test.sh runs it)"]
fn samples_carry_their_cgroup_and_the_report_groups_by_it() {
    require_recording();
    let d = tmpdir("bycg");
    let mult = multiply(&d);
    let cg_bin = callgraph(&d);
    // a parent (the host's view of two containers) with two children
    let root = cgroup2_root();
    let parent = format!("mantle-prof-cg-{}", std::process::id());
    let (ra, rb) = (format!("/{parent}/a"), format!("/{parent}/b"));
    std::fs::create_dir(root.join(&parent)).unwrap();
    let _sp = Scratch(root.join(&parent), Vec::new());
    let (ca, cb) = (root.join(&ra[1..]), root.join(&rb[1..]));
    std::fs::create_dir(&ca).unwrap();
    let mut sa = Scratch(ca.clone(), Vec::new());
    std::fs::create_dir(&cb).unwrap();
    let mut sb = Scratch(cb.clone(), Vec::new());
    let start_in = |cg: &Path, bin: &Path, arg: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec {} {arg}",
                cg.display(),
                bin.display()
            ))
            .spawn()
            .unwrap()
    };
    sa.1.push(start_in(&ca, &mult, "100000000"));
    sb.1.push(start_in(&cb, &cg_bin, "100000"));
    std::thread::sleep(Duration::from_millis(300));
    for (stacks, no_sample_cgroup, source) in [
        (mantle_prof::Stacks::Perf, false, "bpf"),
        (mantle_prof::Stacks::Dwarf, false, "perf-sample"),
        (mantle_prof::Stacks::Dwarf, true, "proc"),
    ] {
        // the parent's tasks only (perf's -G): a short report
        let mut o = opts(&d, Target::Cgroup(root.join(&parent)));
        o.freq = Some(1000);
        o.duration = Some(Duration::from_millis(2000));
        o.stacks = stacks;
        o.force = true;
        o.faults.no_sample_cgroup = no_sample_cgroup;
        let s = record(&o).expect("record");
        assert_eq!(s.meta.cgroups.as_deref(), Some(source));
        let r = report::report(
            &d.join("s"),
            &ReportOpts {
                by_cgroup: true,
                flame_root: mantle_prof::model::FlameRoot::Cgroup,
                ..Default::default()
            },
        )
        .expect("report");
        let text = render_text(&r);
        assert!(text.contains(&format!("cgroup {ra}:")), "{source}: {text}");
        let by = r.by_cgroup.as_ref().unwrap();
        let row = |path: &str| by.iter().find(|c| c.cgroup == path).unwrap();
        let (a, b) = (row(&ra), row(&rb));
        let has_comm = |c: &mantle_prof::model::CgroupRow, comm: &str| {
            c.commands.iter().any(|x| x.component == comm)
        };
        let has_sym = |c: &mantle_prof::model::CgroupRow, sym: &str| {
            c.symbols.iter().any(|x| x.symbol == sym)
        };
        // the machine may be loaded: a share of 2 s on 2 CPUs at 1 kHz
        assert!(a.samples > 100 && b.samples > 100, "{source}: {text}");
        assert_eq!(by.len(), 2, "{source}: {text}");
        assert_eq!(a.commands.len(), 1, "{source}: {text}");
        assert!(
            has_comm(a, "multiply") && !has_comm(a, "callgraph"),
            "{text}"
        );
        assert!(
            has_comm(b, "callgraph") && !has_comm(b, "multiply"),
            "{text}"
        );
        assert!(
            has_sym(a, "slow_multiply") && !has_sym(b, "slow_multiply"),
            "{text}"
        );
        // the cgroup's id is its directory's inode
        use std::os::unix::fs::MetadataExt;
        assert_eq!(a.id, std::fs::metadata(&ca).unwrap().ino(), "{source}");
        // the flame graph's roots, and pprof's label
        let folded = r.folded();
        assert!(folded.iter().any(|(l, _)| l.starts_with(&format!("{rb};"))));
        let pb = mantle_prof::pprof::build(&r);
        let st = &pb.string_table;
        let key = st.iter().position(|s| s == "cgroup").unwrap() as i64;
        let val = st.iter().position(|s| *s == ra).unwrap() as i64;
        let labelled: i64 = pb
            .sample
            .iter()
            .filter(|s| s.label.iter().any(|l| l.key == key && l.str == val))
            .map(|s| s.value[0])
            .sum();
        assert_eq!(labelled as u64, a.samples, "{source}");
    }
    drop(sa);
    drop(sb);
    drop(_sp);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A command that spins on one CPU for `secs` seconds.
fn busy(secs: f64) -> Target {
    Target::Command(
        [
            "timeout",
            &format!("{secs}"),
            "sh",
            "-c",
            "while :; do :; done",
        ]
        .map(String::from)
        .to_vec(),
    )
}

/// The sessions of a continuous recording in `dir`, oldest first.
fn sessions_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("meta.json").is_file())
        .collect();
    v.sort();
    v
}

/// `--continuous --rotate 1s` of a command spinning 4.5 s, on the eBPF
/// path:
/// a session per period, each an ordinary session; and no sample is lost
/// or counted twice at a rotation: the sessions' profiles together hold
/// exactly the samples the sample path counted over the whole run (its
/// own counter, read per period into each meta.json), none lost. Each
/// period's profile is within a few samples of its own count (a sample
/// taken while the maps flip lands in the next period).
#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it)"]
fn continuous_sessions_partition_the_samples() {
    require_recording();
    let d = tmpdir("cont");
    let dir = d.join("c");
    let mut o = opts(&d, busy(4.5));
    o.freq = Some(1000);
    o.continuous = Some(mantle_prof::record::Continuous {
        dir: dir.clone(),
        rotate: Duration::from_secs(1),
        keep: Duration::from_secs(60),
        max_bytes: None,
    });
    let s = record(&o).expect("record");
    let c = s.continuous.as_ref().expect("continuous summary");
    let found = sessions_in(&dir);
    assert!((3..=6).contains(&found.len()), "{:?}", c.written);
    assert_eq!(found.len(), c.written.len());
    assert!(c.deleted.is_empty());
    let (mut total, mut counted, mut lost) = (0u64, 0u64, 0u64);
    let mut last_end = 0u64;
    for (i, p) in found.iter().enumerate() {
        let sess = mantle_prof::session::read_session(p).expect("read a period's session");
        let m = &sess.meta;
        // a whole period has samples (the last one is what was left;
        // a loaded machine gives the spinning command a small share)
        if i + 1 < found.len() {
            assert!(m.samples > 0, "{}: {} samples", p.display(), m.samples);
        }
        // periods follow each other
        assert!(m.start_unix_ns >= last_end, "{}", p.display());
        last_end = m.start_unix_ns + m.duration_ns;
        let t = sess.profile.total();
        assert!(
            t.abs_diff(m.samples) <= 64,
            "{}: {t} vs {}",
            p.display(),
            m.samples
        );
        total += t;
        counted += m.samples;
        lost += m.lost_samples;
        report::report(p, &ReportOpts::default()).expect("report a period");
    }
    assert_eq!(lost, 0);
    assert_eq!(total, counted, "samples lost or doubled at rotations");
    assert_eq!(c.samples, total);
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--rotate 1s --keep 3s` keeps the newest three sessions and deletes
/// the oldest; `--max-size` smaller than one session keeps the newest
/// only; a directory of another name in DIR is never touched.
#[test]
#[ignore = "needs root, perf_event_open and eBPF (scripts/test.sh runs it)"]
fn continuous_recording_keeps_the_newest() {
    require_recording();
    let d = tmpdir("keep");
    let dir = d.join("c");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(dir.join("mine")).unwrap();
    std::fs::write(dir.join("mine/meta.json"), b"{}").unwrap();
    let mut o = opts(&d, busy(5.5));
    o.freq = Some(500);
    o.continuous = Some(mantle_prof::record::Continuous {
        dir: dir.clone(),
        rotate: Duration::from_secs(1),
        keep: Duration::from_secs(3),
        max_bytes: None,
    });
    let s = record(&o).expect("record");
    let c = s.continuous.unwrap();
    assert!(c.written.len() >= 5, "{:?}", c.written);
    let left: Vec<String> = sessions_in(&dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "mine")
        .collect();
    assert_eq!(left, c.written[c.written.len() - 3..], "{c:?}");
    assert_eq!(c.deleted, c.written[..c.written.len() - 3], "{c:?}");
    assert!(dir.join("mine/meta.json").exists());
    // a size bound below one session: the newest alone stays
    let dir2 = d.join("c2");
    o.target = busy(2.5);
    o.continuous = Some(mantle_prof::record::Continuous {
        dir: dir2.clone(),
        rotate: Duration::from_secs(1),
        keep: Duration::from_secs(60),
        max_bytes: Some(1),
    });
    let c = record(&o).expect("record").continuous.unwrap();
    assert!(c.written.len() >= 2, "{c:?}");
    let left = sessions_in(&dir2);
    assert_eq!(left.len(), 1);
    assert!(left[0].ends_with(c.written.last().unwrap()));
    std::fs::remove_dir_all(&d).unwrap();
}

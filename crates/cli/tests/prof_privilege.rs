//! `mantle prof` and privilege (issue 33): recording is checked by
//! capability, not by uid, as perf checks it. A non-root user holding
//! CAP_BPF and CAP_PERFMON records on the eBPF sample path; nobody, and
//! uid 0 in `unshare -Ur` (all capabilities of its own namespace, none
//! that count), record their own commands in user mode through the perf
//! ring (`perf_event_paranoid` 2), and are refused with exit 4 naming
//! what is missing for anything more (another user's process, every CPU,
//! the eBPF path's options), before anything is loaded; a report of
//! another user's session is exit 4 too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");
const NOBODY: &[&str] = &["--reuid=nobody", "--regid=nogroup", "--clear-groups"];

fn run(c: &mut Command) -> (i32, String) {
    let o: Output = c.stdin(Stdio::null()).output().expect("run");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A directory nobody may write in (removed by the caller).
fn nobody_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-prof-priv-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    d
}

fn record_args(out: &Path) -> Vec<String> {
    ["prof", "record", "-q", "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            out.display().to_string(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done".into(),
        ])
        .collect()
}

/// bench/prof/callgraph.c (main -> a -> b, main -> c -> b) with frame
/// pointers, built into `dir` (readable by nobody).
fn callgraph(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/prof/callgraph.c");
    let out = dir.join("callgraph");
    mantle_testsupport::build::run_cc(
        "bench/prof/callgraph.c",
        Command::new("cc")
            .args(["-O1", "-fno-omit-frame-pointer", "-fno-inline", "-g", "-o"])
            .arg(&out)
            .arg(&src),
    );
    out
}

/// The report of a session's `callgraph` samples, read as root.
fn report_of(s: &Path) -> mantle_prof::Report {
    mantle_prof::report::report(
        s,
        &mantle_prof::ReportOpts {
            comm: Some("callgraph".into()),
            ..Default::default()
        },
    )
    .expect("report")
}

/// `perf_event_paranoid` 2 lets a user without any capability profile
/// their own processes in user mode (perf's `:u`): nobody records their
/// own command through the perf ring, with frame-pointer stacks as good
/// as the eBPF path's, no kernel samples, and the session says what this
/// mode lacks. Before issue 33 this was exit 4.
#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn nobody_records_their_own_command_user_mode_only() {
    mantle_testsupport::require_root("setpriv to nobody");
    let d = nobody_dir("own");
    let bin = callgraph(&d);
    let out = d.join("s");
    let (code, err) = run(Command::new("setpriv").args(NOBODY).arg(MANTLE).args([
        "prof",
        "record",
        "-q",
        "-F",
        "2000",
        "-o",
        &out.display().to_string(),
        "--",
        &bin.display().to_string(),
        "600",
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("user-mode samples only"), "{err}");
    let m = std::fs::metadata(&out).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&m), 65534);
    let r = report_of(&out);
    let ctx = mantle_prof::model::render_text(&r);
    assert!(r.meta.user_only, "{ctx}");
    assert_eq!(r.meta.sample_path.as_deref(), Some("perf-ring"), "{ctx}");
    // unprivileged, the samples carry their cgroup too (the kernel's
    // PERF_SAMPLE_CGROUP, which needs no privilege), named at record time
    assert_eq!(r.meta.cgroups.as_deref(), Some("perf-sample"), "{ctx}");
    let by = mantle_prof::report::report(
        &out,
        &mantle_prof::ReportOpts {
            comm: Some("callgraph".into()),
            by_cgroup: true,
            ..Default::default()
        },
    )
    .expect("report")
    .by_cgroup
    .unwrap();
    let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mine = mine.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    assert_eq!(by.len(), 1, "{by:?}");
    assert_eq!(by[0].cgroup, mine, "{by:?}");
    assert!(r.total > 200, "{ctx}");
    assert!(
        r.components.iter().all(|c| c.kernel == 0),
        "no kernel samples: {ctx}"
    );
    // the stacks: b is called from a and c, as the program is written (but
    // for the few samples in a function's first instructions, before its
    // frame pointer is pushed, as perf -g)
    let b = mantle_prof::model::call_graph(&r, "b").expect("b in the stacks");
    let from: u64 = b
        .callers
        .iter()
        .filter(|c| c.symbol == "a" || c.symbol == "c")
        .map(|c| c.samples)
        .sum();
    assert!(from * 100 >= b.inclusive * 97, "{:?} {ctx}", b.callers);
    // and nobody reads it back
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .args([MANTLE, "prof", "report", "-i"])
        .arg(&out));
    assert_eq!(code, 0, "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// What nobody may not do is exit 4, naming what is missing: another
/// user's process, every CPU, and the options of the eBPF sample path.
#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn nobody_is_refused_with_4_naming_the_capabilities() {
    mantle_testsupport::require_root("setpriv to nobody");
    let d = nobody_dir("nobody");
    let out = d.join("s");
    let mut root_proc = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = root_proc.id().to_string();
    let as_nobody = |args: &[&str]| {
        run(Command::new("setpriv")
            .args(NOBODY)
            .arg(MANTLE)
            .args(["prof", "record", "-q", "-o"])
            .arg(&out)
            .args(args))
    };
    let (code, err) = as_nobody(&["-p", &pid, "--duration", "1s"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!("pid {pid} is not yours")) && err.contains("CAP_PERFMON"),
        "{err}"
    );
    let (code, err) = as_nobody(&["-a", "--duration", "1s"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("-a") && err.contains("missing: CAP_PERFMON"),
        "{err}"
    );
    let (code, err) = as_nobody(&["--cgroup", "/sys/fs/cgroup/unified", "--duration", "1s"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("--cgroup") && err.contains("missing: CAP_PERFMON"),
        "{err}"
    );
    for opt in [
        &["--transport", "ring"][..],
        &["--self-timing"][..],
        &["--stacks", "bpf"][..],
        &["--off-cpu"][..],
    ] {
        let mut a = opt.to_vec();
        a.extend(["--", "true"]);
        let (code, err) = as_nobody(&a);
        assert_eq!(code, 4, "{opt:?}: {err}");
        assert!(err.contains("missing: CAP_BPF, CAP_PERFMON"), "{err}");
        assert!(!err.contains("libbpf"), "refused before loading: {err}");
    }
    assert!(!out.exists());
    root_proc.kill().unwrap();
    root_proc.wait().unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

/// uid 0 in `unshare -Ur` has no capability that counts: it records its
/// own command as any user does (user mode, perf ring), and is refused
/// the whole system with 4, the message saying why.
#[test]
#[ignore = "needs root (unshare -Ur)"]
fn uid_0_in_a_user_namespace_is_an_unprivileged_user() {
    mantle_testsupport::require_root("unshare -Ur");
    let d = nobody_dir("userns");
    for as_nobody in [false, true] {
        // a directory the namespace's uid 0 owns (root's, or nobody's):
        // capabilities in a user namespace reach only inodes it maps
        let sub = d.join(format!("u{as_nobody}"));
        std::fs::create_dir(&sub).unwrap();
        if as_nobody {
            std::os::unix::fs::chown(&sub, Some(65534), Some(65534)).unwrap();
        }
        let out = sub.join("s");
        let cmd = || {
            if as_nobody {
                let mut c = Command::new("setpriv");
                c.args(NOBODY).arg("unshare");
                c
            } else {
                Command::new("unshare")
            }
        };
        let (code, err) = run(cmd().args(["-Ur", MANTLE]).args(record_args(&out)));
        assert_eq!(code, 0, "as_nobody {as_nobody}: {err}");
        let (code, err) = run(cmd()
            .args(["-Ur", MANTLE, "prof", "record", "-a", "-o"])
            .arg(sub.join("all")));
        assert_eq!(code, 4, "as_nobody {as_nobody}: {err}");
        assert!(
            err.contains("user namespace other than the initial one"),
            "{err}"
        );
        assert!(!err.contains("libbpf"), "refused before loading: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root (ambient capabilities for a non-root user; loads the sample path)"]
fn a_non_root_user_with_cap_bpf_and_cap_perfmon_records() {
    mantle_testsupport::require_root("ambient capabilities");
    let _lock = mantle_testsupport::lock::take_kernel_lock().expect("kernel lock");
    let d = nobody_dir("caps");
    let out = d.join("s");
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .args([
            "--inh-caps=+bpf,+perfmon",
            "--ambient-caps=+bpf,+perfmon",
            MANTLE,
        ])
        .args(record_args(&out)));
    assert_eq!(code, 0, "{err}");
    // the session is the recording user's, 0700
    let m = std::fs::metadata(&out).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&m), 65534);
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .args([MANTLE, "prof", "report", "-i"])
        .arg(&out));
    assert_eq!(code, 0, "{err}");
    // CAP_PERFMON alone: kernel samples, but no eBPF sample path (the
    // perf ring, untagged); an option of that path is refused, naming
    // CAP_BPF alone
    let perfmon = |extra: &[&str], out: &Path| {
        let mut a = record_args(out);
        let at = a.iter().position(|x| x == "--").unwrap();
        for (i, x) in extra.iter().enumerate() {
            a.insert(at + i, x.to_string());
        }
        run(Command::new("setpriv")
            .args(NOBODY)
            .args(["--inh-caps=+perfmon", "--ambient-caps=+perfmon", MANTLE])
            .args(a))
    };
    let (code, err) = perfmon(&[], &d.join("t"));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("untagged") && !err.contains("user-mode samples only"),
        "{err}"
    );
    let (code, err) = perfmon(&["--transport", "ring"], &d.join("u"));
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("missing: CAP_BPF") && !err.contains("missing: CAP_BPF, CAP_PERFMON"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root (a session of root's, read as nobody)"]
fn a_report_of_another_users_session_is_4() {
    mantle_testsupport::require_root("setpriv to nobody");
    let d = std::env::temp_dir().join(format!("mantle-prof-priv-rep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let o = mantle_prof::synth::SynthOpts {
        rows: 10,
        stacks: 2,
        depth: 3,
        seed: 1,
        images: vec!["/usr/lib/x86_64-linux-gnu/libc.so.6".into()],
    };
    mantle_prof::synth::write(&d, &o).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .args([MANTLE, "prof", "report", "-i"])
        .arg(&d));
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

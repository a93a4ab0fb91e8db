//! `mantle run` and `mantle exec status` with real processes: agents on
//! real programs, exit status pass-through, a crashing guest, fork and
//! exec inside a guest, threads, a static binary, the executive killed
//! with kill -9 (both policies), a system file, and an unprivileged user.
//! Seccomp user notification needs no root: those tests are plain; the
//! ones that need root (running as nobody, reading /run/mantle) are
//! marked. A small C probe (compiled once with cc) makes exact system
//! calls and prints what it saw.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

const PROBE_C: &str = r#"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long status_ppid(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long p = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "PPid:", 5)) p = atol(line + 5);
    if (f) fclose(f);
    return p;
}

static void *worker(void *arg) {
    long want = (long)arg, bad = 0;
    for (int i = 0; i < 200; i++)
        if (syscall(SYS_getppid) != want) bad++;
    return (void *)bad;
}

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "ppid")) {
        long r = syscall(SYS_getppid);
        if (r < 0) printf("err %d\n", errno);
        else if (r == status_ppid()) printf("match %ld\n", r);
        else printf("mismatch %ld %ld\n", r, status_ppid());
        return 0;
    }
    if (!strcmp(m, "threads")) {
        pthread_t t[8];
        long want = status_ppid(), bad = 0;
        for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, worker, (void *)want);
        for (int i = 0; i < 8; i++) { void *b; pthread_join(t[i], &b); bad += (long)b; }
        printf("threads bad %ld\n", bad);
        return bad != 0;
    }
    if (!strcmp(m, "segv")) { *(volatile int *)0 = 1; return 0; }
    if (!strcmp(m, "loop")) {
        printf("%d\n", getpid());
        fflush(stdout);
        for (int i = 0; i < 3000; i++) {
            long r = syscall(SYS_getppid);
            if (r < 0) { printf("errno %d\n", errno); fflush(stdout); return 3; }
            usleep(10000);
        }
        return 0;
    }
    return 2;
}
"#;

/// (dynamic probe, static probe if the static libc is there)
fn probes() -> &'static (PathBuf, Option<PathBuf>) {
    static P: OnceLock<(PathBuf, Option<PathBuf>)> = OnceLock::new();
    P.get_or_init(|| {
        // readable and executable by nobody too; removed at exit
        let dir = mantle_testsupport::scratch::dir("exec-probe");
        let src = dir.join("probe.c");
        std::fs::write(&src, PROBE_C).unwrap();
        let dynamic = dir.join("probe");
        let ok = Command::new("cc")
            .args(["-O1", "-pthread", "-o"])
            .arg(&dynamic)
            .arg(&src)
            .status()
            .expect("cc (the tests build a small C probe)");
        assert!(ok.success(), "cc failed");
        let stat = dir.join("probe-static");
        let s = Command::new("cc")
            .args(["-O1", "-pthread", "-static", "-o"])
            .arg(&stat)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        (dynamic, s.then_some(stat))
    })
}

fn probe() -> &'static Path {
    &probes().0
}

fn mantle(args: &[&str]) -> Output {
    Command::new(MANTLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mantle")
}

/// Compiles C `src` into `out` with -O2 and `flags`.
fn cc(src: &Path, out: &Path, flags: &[&str]) {
    let st = Command::new("cc")
        .arg("-O2")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc {}", src.display());
}

/// Builds bench/NAME.c (e.g. "sleep/alarm") into this test's temporary
/// directory; the binary's path.
fn bench_c(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../bench/{name}.c"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{}-{}",
        name.replace('/', "-"),
        std::process::id()
    ));
    cc(&src, &out, &[]);
    out
}

/// Tests whose figures are times (sleeps, timers, shares of a CPU, packet
/// rates) take this, so that they do not run at the same time as each
/// other: each loads CPU 0 with spinning or real-time guests.
fn timing() -> std::sync::MutexGuard<'static, ()> {
    static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn deny_makes_cat_fail_with_permission_denied() {
    let f = std::env::temp_dir().join(format!("mantle-deny-{}", std::process::id()));
    std::fs::write(&f, "secret\n").unwrap();
    let o = mantle(&[
        "run",
        "--deny",
        "openat=EACCES",
        "--",
        "cat",
        f.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("Permission denied"),
        "{}",
        text(&o.stderr)
    );
    assert!(!text(&o.stdout).contains("secret"));
    // without the agent it works
    let o = mantle(&["run", "--", "cat", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stdout), "secret\n");
    let _ = std::fs::remove_file(f);
}

/// The same agents on the fast path (a preloaded stub, shared slots): a
/// denied open fails, getppid is answered by the executive, and a static
/// command falls back to the protected path, saying so.
#[test]
fn fast_path_runs_the_same_agents() {
    let f = std::env::temp_dir().join(format!("mantle-fast-deny-{}", std::process::id()));
    std::fs::write(&f, "secret\n").unwrap();
    let fp = f.to_str().unwrap();
    let o = mantle(&[
        "run",
        "--path",
        "fast",
        "--deny",
        "openat=EACCES",
        "--",
        "cat",
        fp,
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("Permission denied"),
        "{}",
        text(&o.stderr)
    );
    assert!(!text(&o.stdout).contains("secret"));
    let o = mantle(&["run", "--path", "fast", "--", "cat", fp]);
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (Some(0), "secret\n".to_string())
    );
    let o = mantle(&[
        "run",
        "--path",
        "fast",
        "--perform",
        "getppid",
        "--",
        probe().to_str().unwrap(),
        "ppid",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("match "), "{}", text(&o.stdout));
    let o = mantle(&["run", "--path", "fast", "--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    if let Some(s) = &probes().1 {
        let o = mantle(&[
            "run",
            "--path",
            "fast",
            "--deny",
            "getppid=EACCES",
            "--",
            s.to_str().unwrap(),
            "ppid",
        ]);
        assert!(
            text(&o.stderr).contains("statically linked"),
            "{}",
            text(&o.stderr)
        );
        assert_eq!(text(&o.stdout), "err 13\n");
    }
    let _ = std::fs::remove_file(f);
}

#[test]
fn perform_getppid_returns_the_real_parent() {
    let o = mantle(&[
        "run",
        "--perform",
        "getppid",
        "--",
        probe().to_str().unwrap(),
        "ppid",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("match "), "{}", text(&o.stdout));
}

#[test]
fn perform_openat_opens_with_the_guests_cwd() {
    let d = std::env::temp_dir().join(format!("mantle-open-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("f"), "relative\n").unwrap();
    let script = format!("cd {} && cat f", d.display());
    let o = mantle(&["run", "--perform", "openat", "--", "sh", "-c", &script]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "relative\n");
    let o = mantle(&[
        "run",
        "--perform",
        "openat",
        "--",
        "cat",
        "no-such-file-here",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("No such file"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn unsupported_perform_says_enosys() {
    let o = mantle(&["run", "--perform", "getpid", "--", "true"]);
    assert_eq!(o.status.code(), Some(0));
    let o = mantle(&["run", "--perform", "uname", "--", "uname"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o.stderr).contains("ENOSYS"), "{}", text(&o.stderr));
}

#[test]
fn exit_status_passes_through() {
    assert_eq!(
        mantle(&["run", "--", "sh", "-c", "exit 7"]).status.code(),
        Some(7)
    );
    assert_eq!(
        mantle(&["run", "--deny", "getppid", "--", "true"])
            .status
            .code(),
        Some(0)
    );
    // killed by a signal: 128+N like a shell
    let o = mantle(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15));
}

#[test]
fn a_crashing_guest_is_reported_and_the_executive_survives() {
    let o = mantle(&[
        "run",
        "--perform",
        "getppid",
        "--",
        probe().to_str().unwrap(),
        "segv",
    ]);
    assert_eq!(o.status.code(), Some(128 + 11));
    assert!(
        text(&o.stderr).contains("killed by SIGSEGV"),
        "{}",
        text(&o.stderr)
    );
    // a crash inside the tree: the executive goes on serving the rest
    let p = probe().to_str().unwrap();
    let script = format!("{p} segv; {p} ppid");
    let o = mantle(&["run", "--deny", "getppid=EACCES", "--", "sh", "-c", &script]);
    assert!(text(&o.stdout).contains("err 13"), "{}", text(&o.stdout));
}

#[test]
fn fork_and_exec_inside_a_guest_stay_guests() {
    let p = probe().to_str().unwrap();
    // a grandchild (sh -> sh -> probe), after two execs
    let script = format!("sh -c '{p} ppid' | cat");
    let o = mantle(&["run", "--deny", "getppid=EACCES", "--", "sh", "-c", &script]);
    assert_eq!(text(&o.stdout), "err 13\n", "{}", text(&o.stderr));
}

#[test]
fn a_shell_pipeline_works() {
    let o = mantle(&[
        "run",
        "--perform",
        "getppid",
        "--",
        "sh",
        "-c",
        "printf 'b\\na\\nc\\n' | sort | head -n 2 | tr a-z A-Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "A\nB\n");
}

#[test]
fn a_multi_threaded_guest() {
    let o = mantle(&[
        "run",
        "--perform",
        "getppid",
        "--",
        probe().to_str().unwrap(),
        "threads",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert_eq!(text(&o.stdout), "threads bad 0\n");
}

#[test]
fn a_static_binary() {
    let Some(s) = &probes().1 else {
        // no static libc: the fallback is busybox, when present
        assert!(
            !mantle_testsupport::ci() || mantle_testsupport::have_program("busybox"),
            "neither a static libc for cc -static nor busybox"
        );
        let o = mantle(&["run", "--deny", "uname=EPERM", "--", "busybox", "uname"]);
        assert_ne!(o.status.code(), Some(0));
        return;
    };
    let o = mantle(&[
        "run",
        "--deny",
        "getppid=EACCES",
        "--",
        s.to_str().unwrap(),
        "ppid",
    ]);
    assert_eq!(text(&o.stdout), "err 13\n");
    let o = mantle(&[
        "run",
        "--perform",
        "getppid",
        "--",
        s.to_str().unwrap(),
        "threads",
    ]);
    assert_eq!(text(&o.stdout), "threads bad 0\n", "{}", text(&o.stderr));
}

#[test]
fn bad_options_are_usage_errors() {
    // the fast path runs one command, not a system file
    let o = mantle(&["run", "--path", "fast", "--system", "/dev/null"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    let o = mantle(&["run", "--deny", "nosuchcall", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    let o = mantle(&["run", "--", "no-such-command-for-mantle"]);
    assert_eq!(o.status.code(), Some(127));
    let o = mantle(&["run", "--priority", "100", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    // 0: SCHED_OTHER, no warning
    let o = mantle(&["run", "-v", "--priority", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        !text(&o.stderr).contains("SCHED_FIFO"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains("normal priority"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn verbose_says_the_wake_up_mode() {
    let o = mantle(&["run", "-v", "--deny", "getppid", "--", "true"]);
    let e = text(&o.stderr);
    assert!(e.contains("SYNC_WAKE_UP"), "{e}");
    assert!(e.contains("interposed calls: getppid"), "{e}");
    let o = mantle(&["run", "-v", "--no-sync-wake-up", "--", "true"]);
    assert!(text(&o.stderr).contains("SYNC_WAKE_UP off"));
}

#[test]
fn a_system_file_starts_every_guest() {
    let d = std::env::temp_dir().join(format!("mantle-system-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = probe().to_str().unwrap();
    let f = d.join("sys.toml");
    std::fs::write(
        &f,
        format!(
            "[[guest]]\nname = \"denied\"\ncommand = [\"{p}\", \"ppid\"]\ndeny = [\"getppid=EACCES\"]\n\n[[guest]]\nname = \"performed\"\ncommand = [\"{p}\", \"ppid\"]\nperform = [\"getppid\"]\n"
        ),
    )
    .unwrap();
    let o = mantle(&["run", "--system", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("err 13") && out.contains("match "), "{out}");
    std::fs::write(&f, "[[guest]]\ncommand = [\"true\"]\nbogus = 1\n").unwrap();
    assert_eq!(
        mantle(&["run", "--system", f.to_str().unwrap()])
            .status
            .code(),
        Some(125)
    );
    let _ = std::fs::remove_dir_all(d);
}

/// Starts `mantle run ARGS -- probe loop`; returns the child, the guest
/// pid (the probe's first line) and the executive's pid (the reaper's
/// only child).
fn start_loop(
    args: &[&str],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    i32,
    i32,
) {
    let mut c = Command::new(MANTLE)
        .arg("run")
        .args(args)
        .arg("--")
        .arg(probe())
        .arg("loop")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let guest: i32 = line.trim().parse().expect("guest pid");
    let front = c.id();
    let children = std::fs::read_to_string(format!("/proc/{front}/task/{front}/children")).unwrap();
    let exec: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    (c, out, guest, exec)
}

fn mantle_exec_status_dir() -> PathBuf {
    if mantle_testsupport::euid() == 0 {
        PathBuf::from("/run/mantle/exec")
    } else {
        match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d).join("mantle/exec"),
            _ => PathBuf::from(format!("/tmp/mantle-{}/exec", mantle_testsupport::euid())),
        }
    }
}

fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

#[test]
fn executive_killed_kills_its_guests() {
    let (c, _out, guest, exec) = start_loop(&["--perform", "getppid"]);
    assert!(!gone(guest));
    // SAFETY-free: kill(1) as a program
    Command::new("kill")
        .args(["-9", &exec.to_string()])
        .status()
        .unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    let e = text(&o.stderr);
    assert!(
        e.contains("killed by SIGKILL") && e.contains("guests were killed"),
        "{e}"
    );
    assert!(
        mantle_testsupport::poll_until_for(Duration::from_secs(5), || gone(guest).then_some(()))
            .is_some(),
        "guest {guest} still runs"
    );
}

#[test]
fn executive_killed_with_fail_open_leaves_guests_running_with_enosys() {
    let (c, mut out, guest, exec) = start_loop(&["--fail-open", "--perform", "getppid"]);
    Command::new("kill")
        .args(["-9", &exec.to_string()])
        .status()
        .unwrap();
    // the guest goes on; its next interposed call fails with ENOSYS
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, format!("errno {}\n", libc::ENOSYS));
    let o = c.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(
        text(&o.stderr).contains("unsupervised"),
        "{}",
        text(&o.stderr)
    );
    let _ =
        mantle_testsupport::poll_until_for(Duration::from_secs(5), || gone(guest).then_some(()));
}

#[test]
fn exec_status_lists_running_guests() {
    let (mut c, _out, guest, exec) = start_loop(&["--perform", "getppid"]);
    let found = mantle_testsupport::poll_until_for(Duration::from_secs(5), || {
        let o = mantle(&["exec", "status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        let e = v.as_array()?.iter().find(|e| e["pid"] == exec)?.clone();
        let g = &e["guests"][0];
        (g["pid"] == guest && g["calls"][0]["count"].as_u64()? > 2).then_some(e)
    })
    .expect("the executive in exec status");
    assert_eq!(found["schema"], "mantle.exec.status/1");
    assert_eq!(found["guests"][0]["state"], "running");
    assert_eq!(found["guests"][0]["calls"][0]["name"], "getppid");
    let t = text(&mantle(&["exec", "status"]).stdout);
    assert!(t.contains(&format!("executive {exec}")), "{t}");
    // the executive dies; the reaper kills the guest and cleans up
    Command::new("kill")
        .args(["-9", &exec.to_string()])
        .status()
        .unwrap();
    let _ = c.wait();
    let file = mantle_exec_status_dir().join(format!("{exec}.json"));
    assert!(!file.exists(), "{} left behind", file.display());
}

#[test]
fn exec_status_locks_shows_each_lock_like_perf_lock_contention() {
    let cpus = mantle_sys::os::allowed_cpus().unwrap();
    let list = cpus
        .iter()
        .take(2)
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    for design in ["giant", "fine"] {
        let (mut c, _out, _guest, exec) = start_loop(&[
            "--exec-locking",
            design,
            "--exec-cpus",
            &list,
            "--perform",
            "getppid",
        ]);
        // the guest's lock counts its calls (published every 100 ms)
        let found = mantle_testsupport::poll_until_for(Duration::from_secs(5), || {
            let o = mantle(&["exec", "status", "--locks", "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
            let e = v.as_array()?.iter().find(|e| e["pid"] == exec)?.clone();
            let g = e["locks"]
                .as_array()?
                .iter()
                .find(|l| l["name"].as_str().is_some_and(|n| n.starts_with("guest ")))?
                .clone();
            (g["acquisitions"].as_u64()? > 2).then_some(e)
        })
        .unwrap_or_else(|| panic!("{design}: the executive's locks in exec status --locks"));
        assert_eq!(found["locking"], design);
        let names: Vec<&str> = found["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.contains(&"giant"), design == "giant", "{names:?}");
        assert!(names.contains(&"executive"), "{names:?}");
        assert!(
            names
                .iter()
                .any(|n| *n == format!("runqueue cpu{}", cpus[0])),
            "{names:?}"
        );
        for l in found["locks"].as_array().unwrap() {
            assert_eq!(l["hold_hist"].as_array().unwrap().len(), 32, "{l}");
            assert!(l["contended"].as_u64() <= l["acquisitions"].as_u64(), "{l}");
        }
        let t = text(&mantle(&["exec", "status", "--locks"]).stdout);
        assert!(
            t.contains(&format!(
                "executive {exec}: {design} locking, threads on CPUs"
            )),
            "{t}"
        );
        for col in [
            "contended",
            "total wait",
            "max wait",
            "avg wait",
            "acquired",
        ] {
            assert!(t.contains(col), "{col}: {t}");
        }
        Command::new("kill")
            .args(["-9", &exec.to_string()])
            .status()
            .unwrap();
        let _ = c.wait();
    }
}

/// `--path fast` on N CPUs: one serving thread per CPU under either
/// design; the guest is answered as on one thread, and the exit record
/// carries each lock's statistics (a run queue per CPU, the guest tree's
/// lock, the shared one, and the giant lock with giant locking).
#[test]
fn the_fast_path_serves_from_a_thread_per_cpu_under_both_designs() {
    let cpus = mantle_sys::os::allowed_cpus().unwrap();
    let list = cpus
        .iter()
        .take(2)
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    for design in ["giant", "fine"] {
        let o = mantle(&[
            "run",
            "--path",
            "fast",
            "--exec-cpus",
            &list,
            "--exec-locking",
            design,
            "--perform",
            "getppid",
            "--json",
            "--",
            "sh",
            "-c",
            "echo $PPID; python3 -c 'import os; print(os.getppid())' 2>/dev/null || echo $PPID",
        ]);
        assert_eq!(o.status.code(), Some(0), "{design}: {}", text(&o.stderr));
        let out = text(&o.stdout);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{design}: {out}");
        let rec = text(&o.stderr)
            .lines()
            .find(|l| l.contains("mantle.run.exit/1"))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .unwrap_or_else(|| panic!("{design}: no exit record: {}", text(&o.stderr)));
        let names: Vec<String> = rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names.iter().any(|n| n == "giant"),
            design == "giant",
            "{names:?}"
        );
        for c in cpus.iter().take(2) {
            assert!(names.contains(&format!("runqueue cpu{c}")), "{names:?}");
        }
        assert!(names.iter().any(|n| n.starts_with("guest ")), "{names:?}");
        let guest = rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"].as_str().unwrap().starts_with("guest "))
            .unwrap();
        // sh's getppid at least (and python's)
        assert!(guest["acquisitions"].as_u64().unwrap() >= 1, "{guest}");
    }
}

#[test]
fn exec_cpus_not_allowed_are_refused() {
    // mantle run's own failures are 125 (its module doc: env's convention)
    let o = mantle(&["run", "--exec-cpus", "1000", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("executive CPU 1000 is not online or not allowed"),
        "{}",
        text(&o.stderr)
    );
    let o = mantle(&["run", "--exec-locking", "coarse", "--", "true"]);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn nobody_can_run_guests_and_is_told_what_needs_root() {
    mantle_testsupport::require_root("running mantle run as nobody");
    // a copy of mantle that nobody can execute
    let dir = probes().0.parent().unwrap();
    let m = dir.join("mantle");
    std::fs::copy(MANTLE, &m).unwrap();
    let f = dir.join("readable");
    std::fs::write(&f, "x\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&m)
        // --sleep: an executive that keeps time asks for SCHED_FIFO 99
        .args([
            "run",
            "-v",
            "--sleep",
            "--deny",
            "openat=EACCES",
            "--",
            "cat",
        ])
        .arg(&f)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let e = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("Permission denied"), "{e}");
    // what needs privilege says so, and the run goes on without it
    assert!(e.contains("SCHED_FIFO 99 refused"), "{e}");
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&m)
        .args(["run", "--perform", "getppid", "--perform", "openat", "--"])
        .arg(probe())
        .arg("ppid")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert!(
        text(&o.stdout).starts_with("match "),
        "{} {}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

#[test]
fn performed_opens_never_reach_the_executives_proc_files() {
    let d = std::env::temp_dir().join(format!("mantle-procself-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let link = d.join("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/proc/self/environ", &link).unwrap();
    // /proc/self is the guest's own
    let o = mantle(&["run", "--perform", "openat", "--", "sh", "-c", "MARK=guest-env; export MARK; cat /proc/self/environ | tr '\\0' '\\n' | grep -c '^MARK=guest-env$'"]);
    assert_eq!(text(&o.stdout), "1\n", "{}", text(&o.stderr));
    // a symbolic link into /proc/self would be the executive's: refused
    let o = mantle(&[
        "run",
        "--perform",
        "openat",
        "--",
        "cat",
        link.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("Permission denied"),
        "{}",
        text(&o.stderr)
    );
    // fd magic links are refused (ELOOP) rather than resolved in the executive
    let o = mantle(&[
        "run",
        "--perform",
        "openat",
        "--",
        "sh",
        "-c",
        "cat /proc/self/fd/0 < /dev/null",
    ]);
    assert_ne!(o.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_guest_cannot_read_the_executives_memory() {
    mantle_testsupport::require_root("a guest of nobody reading its executive (run as nobody)");
    let dir = probes().0.parent().unwrap();
    let m = dir.join("mantle-mem");
    std::fs::copy(MANTLE, &m).unwrap();
    // the fast path's stub, where nobody can read it
    let stub = dir.join("libmantle-stub.so");
    std::fs::copy(built_stub(), &stub).unwrap();
    // the guest's parent is the executive, same user: its memory, its
    // environment and its fds stay closed, on both paths
    for path in ["protected", "fast"] {
        let o = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(&m)
            .args(["run", "--path", path, "--deny", "getppid=EACCES", "--", "sh", "-c"])
            .arg("exec 2>&1; p=$(grep PPid /proc/$$/status | cut -f2); head -c 16 /proc/$p/mem; cat /proc/$p/environ; ls /proc/$p/fd")
            .env_remove("XDG_RUNTIME_DIR")
            .env("MANTLE_STUB", &stub)
            .output()
            .unwrap();
        let out = text(&o.stdout);
        assert_eq!(out.matches("Permission denied").count(), 3, "{path}: {out}");
    }
}

/// The fast path's stub that the build made for this mantle binary (the
/// newest under target/*/build/mantle-exec-*/out/).
fn built_stub() -> PathBuf {
    let build = Path::new(MANTLE).parent().unwrap().join("build");
    std::fs::read_dir(&build)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("mantle-exec-"))
        .map(|e| e.path().join("out/libmantle-stub.so"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .expect("libmantle-stub.so built under target/*/build/mantle-exec-*/out")
}

#[test]
#[ignore = "needs root for a cgroup of its own (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn as_root_the_guests_live_in_a_cgroup_of_their_own_removed_afterwards() {
    mantle_testsupport::require_root("the executive's cgroup");
    let o = mantle(&["run", "--", "sh", "-c", "grep '^0::' /proc/self/cgroup"]);
    let line = text(&o.stdout);
    let name = line.trim().rsplit('/').next().unwrap().to_string();
    assert!(name.starts_with("mantle-exec."), "{line}");
    let root = mantle_sys::probe::cgroup2_mount().unwrap();
    let rel = line.trim().strip_prefix("0::/").unwrap();
    assert!(!root.join(rel).exists(), "{rel} left behind");
}

#[test]
fn sigterm_to_mantle_reaches_the_guest() {
    let mut c = Command::new(MANTLE)
        .args(["run", "--", "sleep", "100"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait until the guest runs: the reaper has a child that has a child
    let front = c.id();
    mantle_testsupport::poll_until_for(Duration::from_secs(5), || {
        let ch = std::fs::read_to_string(format!("/proc/{front}/task/{front}/children")).ok()?;
        let ex: u32 = ch.split_whitespace().next()?.parse().ok()?;
        let g = std::fs::read_to_string(format!("/proc/{ex}/task/{ex}/children")).ok()?;
        let g: u32 = g.split_whitespace().next()?.parse().ok()?;
        std::fs::read_to_string(format!("/proc/{g}/comm"))
            .ok()
            .filter(|c| c.trim() == "sleep")
    })
    .expect("the guest started");
    Command::new("kill")
        .args(["-TERM", &front.to_string()])
        .status()
        .unwrap();
    let st = c.wait().unwrap();
    assert_eq!(st.code(), Some(128 + 15));
}

/// Interposing every call, sendmsg included (the call the launcher passes
/// the listener with), still starts the guest: `--trace=all` sees every
/// call of the shell, and `--deny sendmsg` applies to the guest only.
#[test]
fn interposing_every_call_still_launches() {
    let o = mantle(&["run", "--count=all", "--", "sh", "-c", "echo hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "hi\n");
    let e = text(&o.stderr);
    for call in ["execve", "exit_group", "write"] {
        assert!(e.contains(call), "{call} not counted: {e}");
    }
    let o = mantle(&[
        "run",
        "--deny",
        "sendmsg=EPERM",
        "--",
        "sh",
        "-c",
        "echo hi",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "hi\n");
}

// ---- calls to the executive: ping and guest<->guest RPC (libmantle,
// include/mantle/exec.h), through `mantle run` and `mantle run --system`

const RPC_C: &str = r#"
#include <errno.h>
#include <mantle/exec.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *m = argc > 1 ? argv[1] : "";
    char buf[MANTLE_RPC_MAX], resp[MANTLE_RPC_MAX];
    if (!strcmp(m, "ping")) {
        printf("ping %lld ppid %d\n", (long long)mantle_exec_call(MANTLE_EXEC_PING, 0), getppid());
        return 0;
    }
    if (!strcmp(m, "server")) {
        long n = atol(argv[2]), errs = 0;
        for (long i = 0; i < n; i++) {
            uint32_t tok = 0;
            int64_t k = mantle_rpc_receive(buf, sizeof buf, &tok);
            if (k < 0) { printf("receive %lld\n", (long long)k); return 3; }
            memcpy(resp, "ok:", 3);
            memcpy(resp + 3, buf, (size_t)k);
            if (mantle_rpc_reply(tok, resp, (size_t)k + 3) != 0) errs++;
        }
        printf("served %ld errs %ld\n", n, errs);
        return 0;
    }
    if (!strcmp(m, "rserver")) {
        long n = atol(argv[2]);
        uint32_t tok = 0;
        size_t rl = 0;
        for (long i = 0; i < n; i++) {
            int64_t k = mantle_rpc_reply_receive(tok, resp, rl, buf, sizeof buf, &tok);
            if (k < 0) { printf("reply_receive %lld\n", (long long)k); return 3; }
            memcpy(resp, "ok:", 3);
            memcpy(resp + 3, buf, (size_t)k);
            rl = (size_t)k + 3;
        }
        printf("rserved %ld last %d\n", n, mantle_rpc_reply(tok, resp, rl));
        return 0;
    }
    if (!strcmp(m, "client")) {
        uint32_t s = (uint32_t)atoi(argv[2]);
        long n = atol(argv[3]), bad = 0;
        for (long i = 0; i < n; i++) {
            int l = snprintf(buf, sizeof buf, "request %ld", i);
            int64_t k = mantle_rpc_call(s, buf, (size_t)l, resp, sizeof resp);
            if (k != l + 3 || memcmp(resp, "ok:", 3) || memcmp(resp + 3, buf, (size_t)l)) {
                if (bad++ < 3) printf("bad %ld: %lld\n", i, (long long)k);
            }
        }
        printf("client ok %ld bad %ld\n", n - bad, bad);
        return 0;
    }
    if (!strcmp(m, "noserver")) {
        printf("noserver %lld\n", (long long)mantle_rpc_call(7, "x", 1, resp, sizeof resp));
        return 0;
    }
    if (!strcmp(m, "corrupt")) {
        uint32_t s = (uint32_t)atoi(argv[2]);
        printf("badreq %lld\n", (long long)mantle_rpc_call(s, (void *)8, 10, resp, 16));
        printf("huge %lld\n", (long long)mantle_rpc_call(s, buf, 1u << 30, resp, 16));
        printf("badtoken %d\n", mantle_rpc_reply(12345, buf, 1));
        printf("badop %lld\n", (long long)mantle_exec_call(99, 0));
        printf("badresp %lld\n", (long long)mantle_rpc_call(s, "hi", 2, (void *)8, 16));
        int64_t k = mantle_rpc_call(s, "fine", 4, resp, sizeof resp);
        printf("after %lld %.*s\n", (long long)k, k > 0 ? (int)k : 0, resp);
        return 0;
    }
    return 2;
}
"#;

/// The RPC program, linked with libmantle (rpath to it).
fn rpc_prog() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let lib = mantle_testsupport::build::libmantle().unwrap_or_else(|e| panic!("{e}"));
        let lib_dir = lib.parent().unwrap();
        let dir = std::env::temp_dir().join(format!("mantle-exec-rpc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("rpc.c");
        std::fs::write(&src, RPC_C).unwrap();
        let bin = dir.join("rpc");
        mantle_testsupport::build::cc_with_libmantle("the RPC test program", &src, &bin, lib_dir);
        bin
    })
}

/// `mantle run --system` with these guests (name, argv).
fn run_system(tag: &str, guests: &[(&str, Vec<String>)]) -> Output {
    let d = std::env::temp_dir().join(format!("mantle-rpc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("sys.toml");
    let mut t = String::new();
    for (name, argv) in guests {
        let q: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
        t += &format!(
            "[[guest]]\nname = {name:?}\ncommand = [{}]\n\n",
            q.join(", ")
        );
    }
    std::fs::write(&f, t).unwrap();
    let o = mantle(&["run", "--system", f.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(d);
    o
}

#[test]
fn exec_ping_returns_the_executives_pid_and_outside_is_enosys() {
    let p = rpc_prog().to_str().unwrap();
    // the executive forks the guest: its parent is the executive
    let o = mantle(&["run", "--", p, "ping"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let w: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(w.len(), 4, "{out}");
    assert!(w[1].parse::<i64>().unwrap() > 1, "{out}");
    assert_eq!(w[1], w[3], "ping answers the executive's pid: {out}");
    // not a guest: the kernel has no such call
    let o = Command::new(p).arg("ping").output().unwrap();
    assert!(
        text(&o.stdout).starts_with(&format!("ping -{} ", libc::ENOSYS)),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn two_guests_exchange_requests_through_the_executive() {
    let p = rpc_prog().to_str().unwrap().to_string();
    let n = 2000;
    let o = run_system(
        "pair",
        &[
            ("server", vec![p.clone(), "server".into(), n.to_string()]),
            (
                "client",
                vec![p.clone(), "client".into(), "0".into(), n.to_string()],
            ),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("client ok {n} bad 0")), "{out}");
    assert!(out.contains(&format!("served {n} errs 0")), "{out}");
}

#[test]
fn a_server_loop_in_one_trap_per_request() {
    let p = rpc_prog().to_str().unwrap().to_string();
    let n = 1000;
    let o = run_system(
        "rserver",
        &[
            ("server", vec![p.clone(), "rserver".into(), n.to_string()]),
            (
                "client",
                vec![p, "client".into(), "0".into(), n.to_string()],
            ),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("client ok {n} bad 0")), "{out}");
    assert!(out.contains(&format!("rserved {n} last 0")), "{out}");
}

#[test]
fn a_client_without_its_server_gets_esrch() {
    let p = rpc_prog().to_str().unwrap();
    let o = mantle(&["run", "--", p, "noserver"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), format!("noserver -{}", libc::ESRCH));
}

#[test]
fn a_server_that_ends_resets_its_waiting_client() {
    // the server serves 1 request and exits; the client's second call is
    // answered -ECONNRESET (or -ESRCH if the server was already gone)
    let p = rpc_prog().to_str().unwrap().to_string();
    let o = run_system(
        "reset",
        &[
            ("server", vec![p.clone(), "server".into(), "1".into()]),
            ("client", vec![p, "client".into(), "0".into(), "2".into()]),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("client ok 1 bad 1"), "{out}");
    assert!(
        out.contains(&format!("bad 1: -{}", libc::ECONNRESET))
            || out.contains(&format!("bad 1: -{}", libc::ESRCH)),
        "{out}"
    );
}

#[test]
fn corrupted_requests_are_refused_and_the_executive_goes_on() {
    let p = rpc_prog().to_str().unwrap().to_string();
    // the server serves: the bad response buffer's call, then "fine"
    let o = run_system(
        "corrupt",
        &[
            ("server", vec![p.clone(), "server".into(), "2".into()]),
            ("client", vec![p, "corrupt".into(), "0".into()]),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for want in [
        format!("badreq -{}", libc::EFAULT),
        format!("huge -{}", libc::EMSGSIZE),
        format!("badtoken -{}", libc::ENOENT),
        format!("badop -{}", libc::EINVAL),
        format!("badresp -{}", libc::EFAULT),
        "after 7 ok:fine".to_string(),
        // the server's reply was delivered; the client's buffer was bad
        "served 2 errs 0".to_string(),
    ] {
        assert!(out.contains(&want), "{want:?} not in {out}");
    }
}

#[test]
fn a_killed_client_frees_its_request() {
    // client A is SIGKILLed while its request waits in the queue (the
    // server sleeps first); the server's one receive gets client B's
    let p = rpc_prog().to_str().unwrap().to_string();
    let o = run_system(
        "killed",
        &[
            (
                "server",
                vec![
                    "sh".into(),
                    "-c".into(),
                    format!("sleep 1; exec {p} server 1"),
                ],
            ),
            (
                "a",
                vec![
                    "timeout".into(),
                    "-s".into(),
                    "KILL".into(),
                    "0.3".into(),
                    p.clone(),
                    "client".into(),
                    "0".into(),
                    "1".into(),
                ],
            ),
            (
                "b",
                vec![
                    "sh".into(),
                    "-c".into(),
                    format!("sleep 0.6; exec {p} client 0 1"),
                ],
            ),
        ],
    );
    let out = text(&o.stdout);
    assert!(
        out.contains("client ok 1 bad 0"),
        "{out}\n{}",
        text(&o.stderr)
    );
    assert!(out.contains("served 1 errs 0"), "{out}");
    assert!(!out.contains("client ok 0"), "{out}");
}

#[test]
fn sleep_holds_the_guests_sleep_in_the_executive() {
    let _serial = timing();
    // the executive holds `sleep`'s clock_nanosleep for its time: --count
    // shows the call, with the time held counted as the executive's
    let t0 = std::time::Instant::now();
    let o = mantle(&["run", "--sleep", "--count", "--json", "--", "sleep", "0.2"]);
    let took = t0.elapsed();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(took >= Duration::from_millis(200), "{took:?}");
    let err = text(&o.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("\"count\""))
        .unwrap_or_else(|| panic!("no count line: {err}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let rows = v["count"]["rows"]
        .as_array()
        .or_else(|| v["count"].as_array())
        .cloned();
    let rows = rows.unwrap_or_else(|| panic!("rows in {line}"));
    let sleep = rows
        .iter()
        .find(|r| r["call"] == "clock_nanosleep" || r["name"] == "clock_nanosleep")
        .unwrap_or_else(|| panic!("clock_nanosleep in {line}"));
    assert_eq!(
        sleep["calls"].as_u64().or(sleep["count"].as_u64()),
        Some(1),
        "{line}"
    );
    // a bad option combination is refused as such
    let o = mantle(&["run", "--boost", "99", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    let o = mantle(&["run", "--priority", "5", "--boost", "5", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("must be below"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
#[ignore = "needs root for SCHED_FIFO (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_guests_sleep_wakes_on_time_while_another_guest_spins() {
    let _serial = timing();
    mantle_testsupport::require_root("SCHED_FIFO for the executive and the guests");
    mantle_testsupport::require_programs(&[("python3", "python3")]);
    let dir = std::env::temp_dir().join(format!("mantle-sleep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sys = dir.join("system.toml");
    // both guests and the executive on one CPU; the spinner is a guest at
    // SCHED_OTHER; the sleeper is released by the executive (SCHED_FIFO
    // 99) and boosted above the spinner until its next sleep
    std::fs::write(
        &sys,
        r#"
[[guest]]
name = "spinner"
command = ["timeout", "2", "sh", "-c", "while :; do :; done"]

[[guest]]
name = "sleeper"
sleep = true
command = ["python3", "-c", "import time\nw=[]\nfor i in range(20):\n t=time.monotonic(); time.sleep(0.02); w.append(time.monotonic()-t-0.02)\nprint(max(w)*1e6)"]
"#,
    )
    .unwrap();
    let o = Command::new("taskset")
        .args(["-c", "0"])
        .arg(MANTLE)
        .args(["run", "--boost", "10", "--system"])
        .arg(&sys)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let out = text(&o.stdout);
    let worst_us: f64 = out
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out} {}", text(&o.stderr)));
    // the spinner shares the CPU by the host's fair share otherwise: the
    // executive's release must still come within a few ms (5: tests that
    // do not take timing() run their own SCHED_FIFO 99 executives beside
    // this one, and an equal priority is not preempted; a full-suite run
    // saw 3.3 ms)
    assert!(
        worst_us < 5000.0,
        "worst lateness {worst_us} us: {}",
        text(&o.stderr)
    );
}

/// The fast path holds sleeps too, counted from the guest's own trap
/// stamp; in extended mode the guest spins the last stretch itself
/// (ANS_UNTIL). Whatever the mode, a sleep never ends early.
#[test]
fn fast_path_sleeps_are_held_and_never_end_early() {
    let _serial = timing();
    let bin = bench_c("sleep/sleeper");
    for extended in [None, Some("--extended=300us")] {
        let mut args = vec!["run", "--path", "fast", "--sleep", "--count", "--json"];
        args.extend(extended);
        let o = Command::new(MANTLE)
            .args(&args)
            .arg("--")
            .arg(&bin)
            .args(["2000000", "40"])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{extended:?}: {err}");
        let mut xs: Vec<i64> = text(&o.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 40, "{extended:?}");
        xs.sort();
        // never early: a sleep is at least what was asked
        assert!(
            xs[0] >= 0,
            "{extended:?}: a sleep ended {} ns early",
            -xs[0]
        );
        // each answered by the executive (returned, never left to the
        // kernel: no kernel time), 40 + 3 warm-up sleeps
        let row = err
            .lines()
            .filter(|l| l.contains("\"count\""))
            .find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let rows = v["count"]["rows"].as_array().cloned().unwrap_or_default();
                rows.into_iter().find(|r| r["call"] == "clock_nanosleep")
            })
            .unwrap_or_else(|| panic!("{extended:?}: no clock_nanosleep row: {err}"));
        assert_eq!(row["calls"], 43, "{extended:?}: {row}");
        assert_eq!(row["errors"], 0, "{extended:?}: {row}");
        assert_eq!(row["kernel_ns"], 0, "{extended:?}: {row}");
    }
    let _ = std::fs::remove_file(&bin);
}

/// The count row of `call` in `mantle run --count --json`'s stderr.
fn count_row(err: &str, call: &str) -> Option<serde_json::Value> {
    err.lines()
        .filter(|l| l.contains("\"count\""))
        .find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            let rows = v["count"]["rows"].as_array().cloned().unwrap_or_default();
            rows.into_iter().find(|r| r["call"] == call)
        })
}

/// No sleep ends before its time (issue 29: with --boost or --extended an
/// absolute sleep came back up to 89 us early, 1-3 times in 5,000; the
/// protected executive counted the release from a reading taken before
/// the receipt). 100,000 clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)
/// and 100,000 relative nanosleep calls of 20-25 us per configuration
/// (`--sleep`, `--boost 10`, `--extended`, and the help's `--extended=50us
/// --boost 10`, on both paths), by 4 threads of one guest so that sleeps
/// are held at once, every one checked by the guest against the clock
/// read after its return (bench/sleep/early.c). Everything on CPU 0 with
/// the executive (SCHED_FIFO 99): the guest's threads compete with it and
/// each other, which is what exposed the early returns (the old code:
/// 27-45 of 100,000 early, by up to 6.8 us, under `--extended --boost
/// 10`). Each sleep must have been held by the executive (counted, no
/// kernel time), or the test would prove nothing.
#[test]
#[ignore = "needs root for SCHED_FIFO (--boost; scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn no_sleep_ends_early_in_100000_on_either_path() {
    let _serial = timing();
    mantle_testsupport::require_root("SCHED_FIFO for the executive and --boost");
    mantle_testsupport::require_programs(&[("taskset", "util-linux")]);
    let bin = bench_c("sleep/early");
    const N: u64 = 100_000;
    let mut bad = Vec::new();
    for path in ["protected", "fast"] {
        for extra in [
            &[][..],
            &["--boost", "10"],
            &["--extended"],
            &["--extended=50us", "--boost", "10"],
        ] {
            for (how, call) in [
                (["abs", "monotonic"], "clock_nanosleep"),
                (["rel", "nano"], "nanosleep"),
            ] {
                let what = format!(
                    "--path {path} --sleep {} ({})",
                    extra.join(" "),
                    how.join(" ")
                );
                let o = Command::new("taskset")
                    .args(["-c", "0", MANTLE, "run", "--path", path, "--sleep"])
                    .args(extra)
                    .args(["--count", "--json", "--"])
                    .arg(&bin)
                    .args(how)
                    .args(["20000", &N.to_string(), "4"])
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                let (out, err) = (text(&o.stdout), text(&o.stderr));
                let line = out.lines().next().unwrap_or("").to_string();
                let word = |k: &str| -> Option<i64> {
                    let mut it = line.split_whitespace();
                    it.position(|w| w == k)?;
                    it.next()?.parse().ok()
                };
                eprintln!("{what}: {line}");
                let row = count_row(&err, call);
                if o.status.code() != Some(0)
                    || word("sleeps") != Some(N as i64)
                    || word("early") != Some(0)
                {
                    bad.push(format!(
                        "{what}: status {:?}: {line}\n{err}",
                        o.status.code()
                    ));
                } else if row
                    .as_ref()
                    .is_none_or(|r| r["calls"] != N || r["errors"] != 0 || r["kernel_ns"] != 0)
                {
                    bad.push(format!("{what}: not every sleep was held: {row:?}"));
                }
            }
        }
    }
    let _ = std::fs::remove_file(&bin);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Every clock id clock_nanosleep takes (and some it does not) answers a
/// guest as it answers a plain process: the executive holds the ones it
/// can (docs/exec.md "Time"), the kernel does the rest (CPU-time clocks,
/// the _ALARM ones, absolute REALTIME/TAI/BOOTTIME, unknown ids), and
/// none ends early.
#[test]
fn every_clock_id_sleeps_as_linux_does_under_the_executive() {
    let _serial = timing();
    let bin = bench_c("sleep/early");
    let native = Command::new(&bin).arg("clocks").output().unwrap();
    assert_eq!(native.status.code(), Some(0), "{}", text(&native.stdout));
    let native = text(&native.stdout);
    assert!(native.lines().count() >= 38, "{native}");
    for path in ["protected", "fast"] {
        for extra in [&[][..], &["--extended"]] {
            let o = Command::new(MANTLE)
                .args(["run", "--path", path, "--sleep"])
                .args(extra)
                .arg("--")
                .arg(&bin)
                .arg("clocks")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let what = format!("--path {path} {extra:?}");
            assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o.stderr));
            assert_eq!(text(&o.stdout), native, "{what}");
        }
    }
    let _ = std::fs::remove_file(&bin);
}

/// `--timers` on both paths: setitimer's signals come from the executive
/// at their period, and alarm(1) rings after a second (it returned ENOSYS
/// on the fast path before, silently).
#[test]
fn timers_are_kept_and_fired_by_the_executive() {
    let _serial = timing();
    let bin = bench_c("sleep/alarm");
    for path in ["protected", "fast"] {
        let o = Command::new(MANTLE)
            .args(["run", "--path", path, "--timers", "--trace=setitimer", "--"])
            .arg(&bin)
            .args(["2000", "20"])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{path}: {err}");
        // the executive kept the timer (the kernel never saw it) ...
        assert!(
            err.contains("(executive's timer: 14 in 2.0ms, every 2.0ms)"),
            "{path}: {err}"
        );
        // ... and its signals came: 20 inter-arrival times near 2 ms
        let mut xs: Vec<u64> = text(&o.stdout)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 20, "{path}");
        xs.sort();
        let median = xs[10];
        assert!(
            (1_500_000..3_000_000).contains(&median),
            "{path}: median inter-arrival {median} ns: {xs:?}"
        );
        // alarm(1): kept, and rung after a second (never before)
        let o = Command::new(MANTLE)
            .args(["run", "--path", path, "--timers", "--trace=alarm", "--"])
            .arg(&bin)
            .args(["once", "1"])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{path}: {err}");
        assert!(
            err.contains("(executive's timer: 14 in 1.00s, every 0ns)"),
            "{path}: {err}"
        );
        let out = text(&o.stdout);
        let took: u64 = out
            .split_whitespace()
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{path}: {out} {err}"));
        assert!(
            (1_000_000_000..1_500_000_000).contains(&took),
            "{path}: alarm(1) rang after {took} ns"
        );
    }
    let _ = std::fs::remove_file(&bin);
}

/// A system file with a [dispatch] table and guests given as (name, sched,
/// python source) in a temporary directory; the file's path.
fn dispatched_system(tag: &str, guests: &[(&str, Option<&str>, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mantle-dispatch-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut toml = String::from("[dispatch]\ncpus = [0]\nquantum = \"10ms\"\n");
    for (name, sched, src) in guests {
        toml.push_str(&format!("\n[[guest]]\nname = \"{name}\"\n"));
        if let Some(s) = sched {
            toml.push_str(&format!("sched = \"{s}\"\n"));
        }
        toml.push_str(&format!(
            "command = [\"python3\", \"-c\", {}]\n",
            serde_json::to_string(src).unwrap()
        ));
    }
    let f = dir.join("system.toml");
    std::fs::write(&f, toml).unwrap();
    f
}

/// Sleeps until CLOCK_MONOTONIC `at` (seconds; None: starts at once),
/// spins for `secs` of wall time, then prints its name, the CPU time it
/// got while spinning, and when it started and ended. A common `at` makes
/// the guests compete over the same window, whatever their start-up took.
fn spinner(name: &str, at: Option<f64>, secs: f64) -> String {
    let wait = match at {
        Some(at) => format!("time.sleep(max(0, {at} - time.monotonic()))\n"),
        None => String::new(),
    };
    format!(
        "import time\n{wait}c=time.process_time()\nt=time.monotonic()\n\
         while time.monotonic()-t<{secs}: pass\n\
         import sys\nsys.stdout.write('{name} %r %r %r\\n' % (time.process_time()-c, t, time.monotonic()))"
    )
}

/// The parent pid of `pid`, from /proc (None once it is gone).
fn ppid(pid: i64) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// CLOCK_MONOTONIC now + `secs`, in seconds.
fn monotonic_in(secs: f64) -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9 + secs
}

/// name → (CPU seconds, start, end), from the guests' output.
fn cpu_times(out: &str) -> std::collections::HashMap<String, (f64, f64, f64)> {
    out.lines()
        .filter_map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            let f = |k: usize| v.get(k)?.parse::<f64>().ok();
            Some((v.first()?.to_string(), (f(1)?, f(2)?, f(3)?)))
        })
        .collect()
}

/// Two CPUs, four CPU-bound best-effort guests: partitioned two per CPU
/// (each guest's affinity one CPU), two running at once, round robin on
/// each: every guest gets about half a CPU.
#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn the_executive_dispatches_two_cpus_partitioned() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    mantle_testsupport::require_programs(&[("python3", "python3")]);
    mantle_testsupport::require(
        "a second CPU",
        std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2,
        "to dispatch two CPUs",
    );
    // The evenness below is a property of the window in which all four
    // spin. A guest whose start-up (Python's, under the executive) runs
    // past the common start time spends that start-up in turns with its
    // sibling, and then spins alone after the sibling has stopped: its
    // dispatched total is then larger by start-up work, not by a dispatch
    // defect. Such a round says nothing about the dispatcher and is run
    // again (at most 4 rounds; each one that did start together counts).
    for round in 1..=4 {
        match two_cpus_partitioned_round() {
            Some(()) => return,
            None => eprintln!(
                "round {round}: the guests' start-up ran past the common start; running again"
            ),
        }
    }
    panic!("in 4 rounds the four guests never started spinning together");
}

/// One round of the_executive_dispatches_two_cpus_partitioned: `None` if
/// the guests' start-up did not end before the common start (then their
/// dispatched time before the spinning is not yet a fixed baseline), or
/// a guest began spinning more than 50 ms after it.
fn two_cpus_partitioned_round() -> Option<()> {
    let lead = 4.0;
    let at = monotonic_in(lead);
    let names = ["a", "b", "c", "d"];
    let guests: Vec<(&str, Option<&str>, String)> = names
        .iter()
        .map(|n| {
            // its affinity on stderr first, in one write
            let spin = spinner(n, Some(at), 2.0).replace(
                "import sys\n",
                &format!(
                    "import os, sys\nsys.stderr.write('{n} %s\\n' % ' '.join(map(str, os.sched_getaffinity(0))))\n"
                ),
            );
            (*n, None, spin)
        })
        .collect();
    let refs: Vec<(&str, Option<&str>, &str)> = guests
        .iter()
        .map(|(n, s, src)| (*n, *s, src.as_str()))
        .collect();
    let f = dispatched_system("twocpu", &refs);
    let dir = f.parent().unwrap().to_path_buf();
    let toml = std::fs::read_to_string(&f)
        .unwrap()
        .replace("cpus = [0]", "cpus = [0, 1]");
    std::fs::write(&f, toml).unwrap();
    let (out, errf) = (dir.join("out"), dir.join("err"));
    let mut child = Command::new(MANTLE)
        .args(["run", "-v", "--system", f.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&errf).unwrap())
        .spawn()
        .expect("run mantle");
    // The baseline: each guest's dispatched time once all four sleep
    // until `at` (two status snapshots 150 ms apart that agree), so that
    // what the window adds is measured without the start-up before it.
    let exec_pid = child.id();
    let dispatched_now = || -> Option<Vec<u64>> {
        let o = mantle(&["exec", "status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        // the executive is `mantle run` itself or its child (born in
        // its cgroup)
        let ours = |e: &serde_json::Value| {
            let pid = e["pid"].as_i64().unwrap_or(0);
            pid == i64::from(exec_pid) || ppid(pid) == Some(i64::from(exec_pid))
        };
        let e = v.as_array()?.iter().find(|e| ours(e))?.clone();
        let gs = e["guests"].as_array()?.clone();
        names
            .iter()
            .map(|n| {
                gs.iter()
                    .find(|g| g["name"] == *n)?
                    .get("dispatched_ns")?
                    .as_u64()
            })
            .collect()
    };
    let mut base: Option<Vec<u64>> = None;
    let mut prev: Option<Vec<u64>> = None;
    while monotonic_in(0.0) < at - 0.05 {
        let now = dispatched_now();
        if now.is_some() && now == prev {
            base = now.clone();
        }
        prev = now;
        std::thread::sleep(Duration::from_millis(150));
    }
    let st = child.wait().unwrap();
    let err = std::fs::read_to_string(&errf).unwrap_or_default();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(st.code(), Some(0), "{err}");
    let t = cpu_times(&stdout);
    assert_eq!(t.len(), 4, "{stdout}\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let base = base?;
    if t.values().any(|(_, start, _)| *start > at + 0.05) {
        return None;
    }
    // two guests on each CPU, each pinned to one (its line on stderr:
    // "NAME CPU")
    let mut on: [Vec<&str>; 2] = [vec![], vec![]];
    for l in err.lines() {
        if let Some((n, c)) = l.split_once(' ') {
            if let (Some(n), Ok(c)) = (names.iter().find(|x| **x == n), c.trim().parse::<usize>()) {
                on[c.min(1)].push(n);
            }
        }
    }
    assert_eq!((on[0].len(), on[1].len()), (2, 2), "guests per CPU: {err}");
    // two dispatched at once: over the 2 s the four spin together, the
    // executive's dispatched time adds up to about two CPUs' worth (4 s;
    // one at a time would be 2). What CPU time that gave the guests
    // depends on the machine's other load, so it is not the measure here.
    let ran: Vec<f64> = err
        .lines()
        .find_map(|l| l.split_once("dispatched s per guest: "))
        .map(|(_, v)| {
            v.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_else(|| panic!("no dispatch summary: {err}"));
    assert_eq!(ran.len(), 4, "{err}");
    let window: Vec<f64> = ran
        .iter()
        .zip(&base)
        .map(|(r, b)| r - *b as f64 / 1e9)
        .collect();
    let total: f64 = window.iter().sum();
    assert!(
        total > 3.0,
        "dispatched {total:.2} s in all in the window ({window:?}): {err}"
    );
    // round robin on each CPU: its two guests' turns in the window even,
    // and each got CPU time
    let ran_of = |n: &str| window[names.iter().position(|x| *x == n).unwrap()];
    for pair in &on {
        let (a, b) = (ran_of(pair[0]), ran_of(pair[1]));
        assert!(
            (a - b).abs() / (a + b) < 0.05,
            "{pair:?}: dispatched {a:.3} s / {b:.3} s in the window"
        );
        for n in pair {
            assert!(t[*n].0 > 0.0, "{n} got no CPU time: {t:?}");
        }
    }
    Some(())
}

/// Per thread (`per = "thread"`): the thread of a guest that asks for
/// SCHED_FIFO runs before its sibling thread, which gets (almost) nothing
/// while it runs; per guest the two share the guest's turns by the host's
/// fair share. The threads spin over the same second of wall time and
/// report their own CPU time.
#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn per_thread_dispatch_runs_a_threads_own_fifo_before_its_sibling() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    let dir = std::env::temp_dir().join(format!("mantle-perthread-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("two.c");
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double end;
static void *run(void *fifo) {
    if (fifo) { struct sched_param p = { .sched_priority = 10 }; if (sched_setscheduler(0, SCHED_FIFO, &p)) perror("setscheduler"); }
    while (now(CLOCK_MONOTONIC) < end) ;
    printf("%s %.3f\n", fifo ? "fifo" : "other", now(CLOCK_THREAD_CPUTIME_ID));
    return 0;
}
int main(void) {
    pthread_t a, b;
    end = now(CLOCK_MONOTONIC) + 1.0;
    pthread_create(&b, 0, run, 0);
    pthread_create(&a, 0, run, (void *)1);
    pthread_join(a, 0); pthread_join(b, 0);
    return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("two");
    cc(&src, &bin, &["-pthread"]);
    let run = |per: &str| {
        let sys = dir.join(format!("{per}.toml"));
        std::fs::write(
            &sys,
            format!(
                "[dispatch]\ncpus = [0]\nper = \"{per}\"\n\n[[guest]]\nname = \"two\"\ncommand = [\"{}\"]\n",
                bin.display()
            ),
        )
        .unwrap();
        let o = mantle(&["run", "--system", sys.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{per}: {}", text(&o.stderr));
        let out = text(&o.stdout);
        let get = |k: &str| -> f64 {
            out.lines()
                .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{per}: no {k} in {out}"))
        };
        (get("fifo "), get("other "))
    };
    let (fifo, other) = run("thread");
    assert!(
        other < 0.1 * (fifo + other),
        "per thread: the sibling ran {other} s beside the FIFO thread's {fifo} s"
    );
    let (fifo, other) = run("guest");
    assert!(
        other > 0.3 * (fifo + other),
        "per guest: the sibling ran {other} s beside {fifo} s (should share)"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // the threads' cgroups and the guests' are gone
    assert_no_cgroups_left();
}

/// A guest's sched_yield gives its turn away in the executive's policy:
/// a guest that yields in a loop gets a sliver of the CPU next to one that
/// spins (the kernel's yield, with only one guest thawed at a time, would
/// change nothing: round robin would split the CPU evenly).
#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_guests_sched_yield_gives_its_turn_to_the_other() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    mantle_testsupport::require_programs(&[("python3", "python3")]);
    // both run from `at` to the same end, the yielder only once the
    // spinner spins (on a loaded machine a start-up may take longer than
    // the 2 s lead: the yielder then yields over a shorter stretch of the
    // spinner's, never alone)
    let at = monotonic_in(2.0);
    let mark = std::env::temp_dir().join(format!("mantle-yield-mark-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let until = |name: &str, body: &str| {
        let pre = if name == "s" {
            format!("open('{}', 'w').close()\n", mark.display())
        } else {
            format!(
                "while not os.path.exists('{}'): time.sleep(0.005)\n",
                mark.display()
            )
        };
        format!(
            "import os, sys, time\ntime.sleep(max(0, {at} - time.monotonic()))\n{pre}\
             c=time.process_time()\nt=time.monotonic()\n\
             while time.monotonic()<{end}: {body}\n\
             sys.stdout.write('{name} %r %r %r\\n' % (time.process_time()-c, t, time.monotonic()))",
            end = at + 2.0
        )
    };
    let f = dispatched_system(
        "yield",
        &[
            ("y", None, &until("y", "os.sched_yield()")),
            ("s", None, &until("s", "pass")),
        ],
    );
    let o = mantle(&["run", "--system", f.to_str().unwrap()]);
    let t = cpu_times(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let share = t["y"].0 / (t["y"].0 + t["s"].0);
    assert!(
        share < 0.2,
        "the yielding guest got {share:.3} of the CPU: {t:?}"
    );
    let _ = std::fs::remove_file(&mark);
    let _ = std::fs::remove_dir_all(f.parent().unwrap());
}

#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn the_executive_dispatches_round_robin_and_edf_with_budgets() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    mantle_testsupport::require_programs(&[("python3", "python3")]);
    // round robin: two CPU-bound guests share CPU 0 evenly
    let at = Some(monotonic_in(2.0));
    let f = dispatched_system(
        "rr",
        &[
            ("a", None, &spinner("a", at, 2.0)),
            ("b", None, &spinner("b", at, 2.0)),
        ],
    );
    let o = mantle(&["run", "--system", f.to_str().unwrap()]);
    let t = cpu_times(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (a, b) = (t["a"].0, t["b"].0);
    assert!(
        (a - b).abs() / (a + b) < 0.05,
        "round robin shares {a} s / {b} s"
    );
    // EDF 2 ms every 10 ms next to a best-effort guest: 20% of the CPU
    // (the host's fair share alone would give each half); its start-up
    // runs at 20% too, so the common start is later
    let at = Some(monotonic_in(3.0));
    let f = dispatched_system(
        "edf",
        &[
            ("rt", Some("edf 2ms/10ms"), &spinner("rt", at, 2.0)),
            ("rt2", Some("edf 3ms/20ms"), &spinner("rt2", at, 2.0)),
            ("be", None, &spinner("be", at, 2.0)),
        ],
    );
    let o = mantle(&["run", "-v", "--system", f.to_str().unwrap()]);
    let t = cpu_times(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(t.len(), 3, "{}\n{}", text(&o.stdout), text(&o.stderr));
    // shares of the 2 s window (the reservations run real-time; the best
    // effort guest shares what is left with the host's other load, so a
    // share of the guests' total would be the load's)
    let (share, share2) = (t["rt"].0 / 2.0, t["rt2"].0 / 2.0);
    assert!(
        (0.15..0.26).contains(&share),
        "EDF 2ms/10ms got {share:.3} of the CPU: {t:?}"
    );
    assert!(
        (0.10..0.20).contains(&share2),
        "EDF 3ms/20ms got {share2:.3} of the CPU: {t:?}"
    );
    // the overrunning reservations were throttled (20% and 15%, not the
    // third fair share would give) and met the deadlines of their
    // feasible set: of about 300 (200 + 100 periods in 2 s) at most 3
    // missed. Not 0: tests that do not take the timing lock run SCHED_FIFO
    // 99 executives of their own beside this one, which an equal priority
    // does not preempt; one full-suite run (2026-11-24, with a benchmark
    // on the other CPU) saw 1 miss with 0.72 ms of lateness at a quantum's
    // end, where the run alone sees none.
    let err = text(&o.stderr);
    let misses: u32 = err
        .split(" deadline misses;")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no deadline count: {err}"));
    assert!(misses <= 3, "{misses} deadline misses: {err}");
    // fixed priority runs first, to its end: the other waits (frozen
    // from its start, it runs its first instruction after hi's last)
    let f = dispatched_system(
        "fifo",
        &[
            ("hi", Some("fifo 10"), &spinner("hi", None, 1.0)),
            ("lo", None, &spinner("lo", None, 1.0)),
        ],
    );
    let o = mantle(&["run", "--system", f.to_str().unwrap()]);
    let t = cpu_times(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (hi, lo) = (t["hi"], t["lo"]);
    assert!(
        lo.1 >= hi.2 - 0.005,
        "lo started at {} before hi ended at {}: {t:?}",
        lo.1,
        hi.2
    );
    let _ = std::fs::remove_dir_all(f.parent().unwrap());
    assert_no_cgroups_left();
}

/// No executive's cgroup (`mantle-exec.PID`, with its guests' and threads'
/// below) is left at the cgroup v2 root.
fn assert_no_cgroups_left() {
    // only those of mantles that have ended: the tests of this binary run
    // in parallel, and a running `mantle run` has its cgroup (a check of
    // every mantle-exec.* failed whenever another test's executive ran)
    let root = mantle_sys::probe::cgroup2_mount().unwrap();
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("mantle-exec.")?;
            (!Path::new(&format!("/proc/{pid}")).exists()).then_some(name)
        })
        .collect();
    assert!(
        left.is_empty(),
        "cgroups left under {}: {left:?}",
        root.display()
    );
}

#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn a_guests_sched_setscheduler_lands_in_the_executives_policy() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    mantle_testsupport::require_programs(&[("python3", "python3")]);
    // the guest asks for SCHED_FIFO 20 and sees it; the kernel never did
    // (field 41 of /proc/self/stat: the host's policy, 0 = SCHED_OTHER)
    // and its getters answer what it set (sched_getparam writes it into
    // the guest's memory), a yield is the executive's, nice is remembered
    let src = "import os, time\nos.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))\n\
               pol = os.sched_getscheduler(0)\n\
               host = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[38]\n\
               prio = os.sched_getparam(0).sched_priority\n\
               os.sched_yield()\n\
               os.setpriority(os.PRIO_PROCESS, 0, 7)\n\
               nice = os.getpriority(os.PRIO_PROCESS, 0)\n\
               hnice = open('/proc/self/stat').read().rsplit(')', 1)[1].split()[16]\n\
               print(pol, host, prio, nice, hnice, flush=True)\ntime.sleep(1.5)\n";
    let f = dispatched_system("setsched", &[("rtprog", None, src)]);
    let mut c = Command::new(MANTLE)
        .args(["run", "--system", f.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // the host policy is the dispatcher's class, never the SCHED_FIFO (1)
    // asked for: SCHED_RR (2) while dispatched (FIFO 20 made it a
    // reservation), SCHED_OTHER before, SCHED_IDLE (5) if it read it woken
    // and not yet dispatched again
    let mut seen: Vec<&str> = line.split_whitespace().collect();
    assert!(["0", "2", "5"].contains(&seen[1]), "host policy {line}");
    seen[1] = "0";
    let line = seen.join(" ");
    assert_eq!(
        line, "1 0 20 7 0",
        "what the guest and the host see: policy, host policy, priority, nice, host nice"
    );
    let front = c.id();
    let g = mantle_testsupport::poll_until_for(Duration::from_secs(5), || {
        let o = mantle(&["exec", "status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v.as_array()?
            .iter()
            .flat_map(|e| e["guests"].as_array().cloned().unwrap_or_default())
            .find(|g| g["name"] == "rtprog" && g["sched"]["kind"] == "fixed")
    })
    .unwrap_or_else(|| panic!("rtprog with a fixed priority in exec status (mantle {front})"));
    assert_eq!(g["sched"]["prio"], 20, "{g}");
    let st = c.wait().unwrap();
    assert!(st.success());
    let _ = std::fs::remove_dir_all(f.parent().unwrap());
}

#[test]
#[ignore = "needs root for pidfd_getfd of the guests' sockets with SCHED_FIFO (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn the_token_scheduler_delivers_in_proportion_to_tokens() {
    let _serial = timing();
    mantle_testsupport::require_root("the executive reading the guests' sockets");
    let dir = std::env::temp_dir().join(format!("mantle-qos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sender, receiver) = (bench_c("qos/sender"), bench_c("qos/receiver"));
    let t0 = {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: t is a valid timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64 + 1_000_000_000
    };
    let port = 42000 + (std::process::id() % 1000) as u16 * 2;
    // two reserved guests, 1000/s and 500/s, each offered 3000/s for 3 s:
    // the executive serves each its tokens per period and no more (Figure
    // 7 is not work-conserving)
    let mut toml = String::from("[qos]\nperiod = \"100ms\"\n");
    for (k, rate) in [(0u16, 1000), (1, 500)] {
        let cmd = [
            receiver.display().to_string(),
            t0.to_string(),
            "3".into(),
            (port + k).to_string(),
            "0".into(),
            dir.join(format!("r{k}")).display().to_string(),
        ];
        toml.push_str(&format!(
            "\n[[guest]]\nname = \"r{k}\"\nqos = {rate}\ncommand = {}\n",
            serde_json::to_string(&cmd).unwrap()
        ));
    }
    std::fs::write(dir.join("qos.toml"), toml).unwrap();
    let mut m = Command::new(MANTLE)
        .args(["run", "--system"])
        .arg(dir.join("qos.toml"))
        .spawn()
        .unwrap();
    let s = Command::new(&sender)
        .args([&t0.to_string(), "4", &port.to_string(), "3000:0", "3000:0"])
        .status()
        .unwrap();
    assert!(s.success());
    assert!(m.wait().unwrap().success());
    for (k, rate) in [(0, 1000.0), (1, 500.0)] {
        let out = std::fs::read_to_string(dir.join(format!("r{k}"))).unwrap();
        // seconds 1 and 2 (the first may start mid-period)
        let got: Vec<f64> = out
            .lines()
            .filter_map(|l| {
                let v: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                (v.len() == 5 && v[0] >= 1).then_some(v[1] as f64)
            })
            .collect();
        assert!(!got.is_empty(), "r{k}: {out}");
        for g in &got {
            assert!(
                (g / rate - 1.0).abs() < 0.1,
                "r{k} got {g}/s for {rate}/s reserved: {out}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// The escape suite: a hostile guest (escape.c) tries every trick it knows,
// as nobody, on both paths; each trick must be refused or redirected.

const ESCAPE_C: &str = include_str!("escape.c");

/// escape.c built dynamic and static, and a copy of mantle, all usable by
/// nobody, in a 0755 directory of their own.
/// A redirect's two trees under the temporary directory, each holding `x`
/// ("OLD" or "NEW"), with `mode` on all three directories; and the
/// `OLD=NEW` spec. The caller removes `base`.
fn redirect_tree(name: &str, mode: u32) -> (PathBuf, PathBuf, PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    let base = std::env::temp_dir().join(format!("mantle-{name}-{}", std::process::id()));
    let (old, new) = (base.join("old"), base.join("new"));
    for (dir, text) in [(&old, "OLD\n"), (&new, "NEW\n")] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("x"), text).unwrap();
    }
    for p in [&base, &old, &new] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let spec = format!("{}={}", old.display(), new.display());
    (base, old, new, spec)
}

fn escape_kit() -> &'static (PathBuf, PathBuf, PathBuf) {
    static K: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    K.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mantle-escape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let src = dir.join("escape.c");
        std::fs::write(&src, ESCAPE_C).unwrap();
        let (dynamic, stat) = (dir.join("escape"), dir.join("escape-static"));
        cc(&src, &dynamic, &["-pthread"]);
        cc(&src, &stat, &["-pthread", "-static"]);
        let m = dir.join("mantle");
        std::fs::copy(MANTLE, &m).unwrap();
        (m, dynamic, stat)
    })
}

/// Runs `mantle ARGS` as nobody (no capability, no supplementary group).
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&escape_kit().0)
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("setpriv")
}

/// A directory nobody may write, with a file `f` and a directory `d` that
/// an unlink would remove.
fn victims(name: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("mantle-victims-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("d")).unwrap();
    std::fs::write(dir.join("f"), "victim\n").unwrap();
    for p in [&dir, &dir.join("d")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::fs::set_permissions(dir.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
    (dir.join("f"), dir.join("d"))
}

/// Every line of `out` that names a try must say `errno E` (E per try:
/// getppid is denied with EPERM, the rest with EACCES); `want` lines
/// must all be there.
fn all_refused(out: &Output, want: &[&str]) {
    let so = text(&out.stdout);
    let se = text(&out.stderr);
    for w in want {
        let line = so
            .lines()
            .find(|l| l.split_whitespace().next() == Some(w))
            .unwrap_or_else(|| panic!("no line for {w}:\n{so}\n{se}"));
        let e = if w.ends_with("getppid") {
            "errno 1"
        } else {
            "errno 13"
        };
        assert!(line.ends_with(e), "{w} escaped: {line}\n{so}\n{se}");
    }
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn escape_suite_deny_holds_on_both_paths_as_nobody() {
    mantle_testsupport::require_root("the escape suite (run as nobody)");
    let (_, dynamic, stat) = escape_kit();
    let (dynamic, stat) = (dynamic.to_str().unwrap(), stat.to_str().unwrap());
    for path in ["protected", "fast"] {
        let (f, d) = victims(path);
        let (fs, ds) = (f.to_str().unwrap(), d.to_str().unwrap());
        let deny = [
            "run",
            "--path",
            path,
            "--deny",
            "unlink=EACCES",
            "--deny",
            "getppid",
            "--",
        ];
        let run = |extra: &[&str]| {
            let mut a: Vec<&str> = deny.to_vec();
            // on the fast path an observing agent served in the stub, so
            // that the stub is loaded (with only enforcing agents, or a
            // --count of named calls, it is not: issue 29) and the tricks
            // below have a stub to defeat
            if path == "fast" {
                a.insert(1, "--count=all");
            }
            a.extend_from_slice(extra);
            as_nobody(&a)
        };
        let family = [
            "unlink",
            "unlinkat",
            "rmdir",
            "unlinkat-dir",
            "libc-unlink",
            "getppid",
        ];
        all_refused(&run(&[dynamic, "unlink", fs, ds]), &family);
        all_refused(
            &run(&[dynamic, "sudoff", fs]),
            &["prctl", "sudoff-unlinkat", "sudoff-getppid"][1..],
        );
        if path == "fast" {
            all_refused(
                &run(&[dynamic, "selector", fs]),
                &["selector-unlinkat", "selector-getppid"],
            );
            all_refused(
                &run(&[dynamic, "tramp", fs]),
                &["tramp-unlinkat", "tramp-getppid"],
            );
        }
        // a static binary (no stub), and an empty environment (no
        // LD_PRELOAD): the filter came with the exec
        all_refused(&run(&[dynamic, "exec", stat, "unlink", fs, ds]), &family);
        all_refused(&run(&[dynamic, "exec", dynamic, "unlink", fs, ds]), &family);
        assert!(f.exists() && d.exists(), "{path}: the victims were removed");
        let _ = std::fs::remove_dir_all(f.parent().unwrap());
    }
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn escape_suite_every_call_of_the_open_family_is_denied() {
    mantle_testsupport::require_root("the escape suite (run as nobody)");
    let (_, _, stat) = escape_kit();
    let (f, _) = victims("open");
    // a static guest: a dynamic one could not load its libraries
    let o = as_nobody(&[
        "run",
        "--deny",
        "openat=EACCES",
        "--",
        stat.to_str().unwrap(),
        "open",
        f.to_str().unwrap(),
    ]);
    all_refused(
        &o,
        &[
            "open",
            "openat",
            "openat2",
            "creat",
            "name_to_handle_at",
            "open_by_handle_at",
            "fopen",
        ],
    );
    let _ = std::fs::remove_dir_all(f.parent().unwrap());
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn escape_suite_io_uring_is_refused_while_enforcing() {
    mantle_testsupport::require_root("the escape suite (run as nobody)");
    let (_, dynamic, _) = escape_kit();
    let d = dynamic.to_str().unwrap();
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim() != "0")
        .unwrap_or(false);
    for path in ["protected", "fast"] {
        let o = as_nobody(&["run", "--path", path, "--deny", "getppid", "--", d, "uring"]);
        assert_eq!(
            text(&o.stdout).trim(),
            "io_uring_setup errno 1",
            "{path}: {}",
            text(&o.stderr)
        );
        let o = as_nobody(&[
            "run",
            "--path",
            path,
            "--deny",
            "getppid",
            "--allow-io-uring",
            "--",
            d,
            "uring",
        ]);
        if disabled {
            eprintln!("kernel.io_uring_disabled is set: --allow-io-uring not checked");
        } else {
            assert_eq!(
                text(&o.stdout).trim(),
                "io_uring_setup ok",
                "{path}: {}",
                text(&o.stderr)
            );
        }
        // no enforcing agent: io_uring is the guest's business
        let o = as_nobody(&["run", "--path", path, "--count", "--", d, "uring"]);
        if !disabled {
            assert_eq!(text(&o.stdout).trim(), "io_uring_setup ok", "{path}");
        }
    }
}

#[test]
#[ignore = "needs root to become nobody (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn escape_suite_redirect_is_a_mount_that_no_path_or_race_escapes() {
    mantle_testsupport::require_root("the escape suite (run as nobody)");
    let (_, dynamic, _) = escape_kit();
    let d = dynamic.to_str().unwrap();
    let (base, old, new, spec) = redirect_tree("redirect", 0o755);
    let os = old.to_str().unwrap();
    // the racing thread flips the path between OLD's file and one outside
    // OLD: an executive that checked the path and let the call continue
    // would see the outside one and the kernel would open OLD's
    let alt = format!("{}/x", new.display());
    let ox = format!("{os}/x");
    for path in ["protected", "fast"] {
        let o = as_nobody(&[
            "run",
            "--path",
            path,
            "--redirect",
            &spec,
            "--",
            d,
            "dirs",
            os,
        ]);
        let so = text(&o.stdout);
        for t in ["dotdot", "procroot", "dirfd", "symlink", "relative"] {
            let line = so
                .lines()
                .find(|l| l.starts_with(t))
                .unwrap_or_else(|| panic!("{path}: no {t} line:\n{so}{}", text(&o.stderr)));
            assert_eq!(
                line,
                format!("{t} ok NEW"),
                "{path}: {so}{}",
                text(&o.stderr)
            );
        }
        // the guest may not unmount what hides OLD, nor exec around it
        let o = as_nobody(&[
            "run",
            "--path",
            path,
            "--redirect",
            &spec,
            "--",
            "sh",
            "-c",
            &format!("umount {os} 2>/dev/null; cat {os}/x; stat -c %s {os}/x; ls {os}"),
        ]);
        assert_eq!(
            text(&o.stdout),
            "NEW\n4\nx\n",
            "{path}: {}",
            text(&o.stderr)
        );
        // a racing thread flips the path: none of 20,000 opens reads OLD
        let o = as_nobody(&[
            "run",
            "--path",
            path,
            "--redirect",
            &spec,
            "--",
            d,
            "race",
            &ox,
            &alt,
            "20000",
        ]);
        let so = text(&o.stdout);
        let w: Vec<&str> = so.split_whitespace().collect();
        assert!(
            w.len() == 7 && w[0] == "race" && w[3] == "OLD",
            "{path}: {so}{}",
            text(&o.stderr)
        );
        let (news, olds) = (w[2].parse::<u32>().unwrap(), w[4].parse::<u32>().unwrap());
        assert_eq!(olds, 0, "{path}: {olds} opens reached OLD: {so}");
        // torn copies of the path fail; most opens land
        assert!(news >= 1000, "{path}: too few opens landed to tell: {so}");
    }
    // outside the guest, nothing changed
    assert_eq!(std::fs::read_to_string(old.join("x")).unwrap(), "OLD\n");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn an_exec_deny_starts_after_the_commands_own_start() {
    for path in ["protected", "fast"] {
        let o = mantle(&[
            "run",
            "--path",
            path,
            "--deny",
            "exec=EACCES",
            "--",
            "sh",
            "-c",
            "echo started; /bin/true; echo rc=$?",
        ]);
        let so = text(&o.stdout);
        assert!(
            so.starts_with("started\n"),
            "{path}: {so}{}",
            text(&o.stderr)
        );
        assert!(
            so.contains("rc=126"),
            "{path}: the guest's own exec ran: {so}"
        );
    }
}

#[test]
fn run_exits_like_a_wrapper() {
    assert_eq!(
        mantle(&["run", "--", "no-such-command-mantle"])
            .status
            .code(),
        Some(127)
    );
    assert_eq!(
        mantle(&["run", "--", "/etc/passwd"]).status.code(),
        Some(126)
    );
    assert_eq!(
        mantle(&["run", "--no-such-option", "--", "true"])
            .status
            .code(),
        Some(125)
    );
    assert_eq!(
        mantle(&["run", "--deny", "opnat", "--", "true"])
            .status
            .code(),
        Some(125)
    );
    assert_eq!(
        mantle(&["run", "--redirect", "/no/such/old=/tmp", "--", "true"])
            .status
            .code(),
        Some(125)
    );
    // the command's own status passes through, even 125-127
    for c in ["0", "3", "125", "126", "127"] {
        let o = mantle(&["run", "--", "sh", "-c", &format!("exit {c}")]);
        assert_eq!(o.status.code(), Some(c.parse().unwrap()));
    }
    // --json: the last line tells a guest's 125 from mantle's
    let last = |o: &Output| -> serde_json::Value {
        let e = text(&o.stderr);
        serde_json::from_str(e.lines().last().unwrap_or("")).unwrap_or_else(|_| panic!("{e}"))
    };
    let o = mantle(&["run", "--json", "--", "sh", "-c", "exit 125"]);
    let v = last(&o);
    assert_eq!(v["schema"], "mantle.run.exit/1");
    assert_eq!(
        (v["status"].as_i64(), v["error"].is_null()),
        (Some(125), true)
    );
    assert_eq!(v["guests"][0]["exit_code"], 125);
    let o = mantle(&["run", "--json", "--deny", "opnat", "--", "true"]);
    let v = last(&o);
    assert_eq!(v["status"], 125);
    assert!(v["error"].as_str().unwrap().contains("opnat"), "{v}");
    let o = mantle(&["run", "--json", "--", "sh", "-c", "kill -9 $$"]);
    let v = last(&o);
    assert_eq!(
        (v["status"].as_i64(), o.status.code()),
        (Some(137), Some(137))
    );
    assert_eq!(v["guests"][0]["state"], "killed");
    assert_eq!(v["guests"][0]["signal"], 9);
}

/// Privilege is capabilities: a uid 0 without any, and root in its own
/// user namespace, get the same enforcement as nobody (and the redirect
/// still works for them), on both paths.
#[test]
#[ignore = "needs root to drop capabilities and make user namespaces (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn escape_suite_holds_for_capability_less_root_and_root_in_a_user_namespace() {
    mantle_testsupport::require_root("the escape suite as capability-less uid 0");
    let (m, dynamic, _) = escape_kit();
    let (base, old, _new, spec) = redirect_tree("capless", 0o777);
    let os = old.to_str().unwrap();
    let wrappers: [&[&str]; 2] = [
        &["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"],
        &["unshare", "-Ur", "--"],
    ];
    for w in wrappers {
        for path in ["protected", "fast"] {
            let o = Command::new(w[0])
                .args(&w[1..])
                .arg(m)
                .args([
                    "run",
                    "--path",
                    path,
                    "--redirect",
                    &spec,
                    "--deny",
                    "unlink=EACCES",
                ])
                .args(["--", "sh", "-c"])
                .arg(format!(
                    "umount {os} 2>/dev/null; umount -l {os} 2>/dev/null; cat {os}/x; \
                     cat /proc/self/root{os}/x; rm {os}/x 2>/dev/null || echo kept"
                ))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                text(&o.stdout),
                "NEW\nNEW\nkept\n",
                "{w:?} {path}: {}",
                text(&o.stderr)
            );
            let (f, _) = victims(&format!("capless-{path}"));
            let o = Command::new(w[0])
                .args(&w[1..])
                .arg(m)
                .args([
                    "run",
                    "--path",
                    path,
                    "--deny",
                    "unlink=EACCES",
                    "--deny",
                    "getppid",
                ])
                .arg("--")
                .arg(dynamic)
                .args(["sudoff", f.to_str().unwrap()])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            all_refused(&o, &["sudoff-unlinkat", "sudoff-getppid"]);
            assert!(f.exists());
            let _ = std::fs::remove_dir_all(f.parent().unwrap());
        }
    }
    assert_eq!(std::fs::read_to_string(old.join("x")).unwrap(), "OLD\n");
    let _ = std::fs::remove_dir_all(&base);
}

// ---------------------------------------------------------------------
// The fast path under load and at the end of its executive: many threads
// and processes, the executive's CPU share while the guest sleeps, and
// what SIGTERM / SIGKILL of `mantle run --path fast` (or of its
// executive) leave behind.
// ---------------------------------------------------------------------

/// crates/exec/tests/guests/crowd.c (many threads or children alive at
/// once, each opening a file), built once into this test's directory.
fn crowd() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../exec/tests/guests/crowd.c");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("crowd-{}", std::process::id()));
        cc(&src, &out, &["-pthread"]);
        out
    })
}

/// A file crowd.c opens and reads a byte of.
fn crowd_input() -> PathBuf {
    let f =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("crowd-input-{}", std::process::id()));
    std::fs::write(&f, "x\n").unwrap();
    f
}

/// 500 threads alive at once, every call of theirs interposed: none
/// fails. (Before the region grew: 64 slots, and the calls of threads
/// without one failed with EAGAIN; 36 of 100 threads' opens failed.)
#[test]
fn fast_path_500_threads_with_every_call_interposed_all_succeed() {
    let f = crowd_input();
    let o = mantle(&[
        "run",
        "--path",
        "fast",
        "--count=all",
        "--",
        crowd().to_str().unwrap(),
        "threads",
        "500",
        "3",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "threads 500 failed 0\n");
    let e = text(&o.stderr);
    assert!(e.contains("openat"), "{e}");
}

/// 1000 children alive at once, every call interposed: all exit 0.
/// (Before: with 200 children, 137 died of SIGSEGV when _exit got EAGAIN.)
#[test]
fn fast_path_1000_children_with_every_call_interposed_all_exit_0() {
    let f = crowd_input();
    let o = mantle(&[
        "run",
        "--path",
        "fast",
        "--count=all",
        "--",
        crowd().to_str().unwrap(),
        "forks",
        "1000",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "forks 1000 ok 1000\n");
    // every child's exit_group reached the count (continued, unseen)
    let e = text(&o.stderr);
    let row = e
        .lines()
        .find(|l| l.trim_end().ends_with(" exit_group"))
        .unwrap_or_else(|| panic!("no exit_group row: {e}"));
    let calls: u64 = row.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!(calls >= 1001, "{row}");
}

/// CPU time of every thread of `pid` so far, in ns: the scheduler's run
/// time (/proc/PID/task/*/schedstat), or utime + stime (USER_HZ ticks of
/// 10 ms) where the kernel keeps no schedstat.
fn cpu_ns(pid: i32) -> u64 {
    let mut sum = 0;
    let mut have = false;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                if let Some(ns) = s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    sum += ns;
                    have = true;
                }
            }
        }
    }
    if have {
        return sum;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // fields 14 and 15 (utime, stime), counted after the comm
    (f[11] + f[12]) * 10_000_000
}

/// The executive's share of one CPU while its guest (`sleep 1000`)
/// sleeps, over 2 s, with `mantle run ARGS`. The executive: the reaper's
/// child. SIGTERM then ends the guest, even in a sleep the executive
/// holds (the stub waits with the guest's signal mask).
fn fast_idle_share(args: &[&str]) -> f64 {
    let mut c = Command::new(MANTLE)
        .arg("run")
        .args(args)
        .args(["--", "sleep", "1000"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let front = c.id();
    let exec: i32 = mantle_testsupport::poll_until_for(Duration::from_secs(10), || {
        let ch = std::fs::read_to_string(format!("/proc/{front}/task/{front}/children")).ok()?;
        let ex: i32 = ch.split_whitespace().next()?.parse().ok()?;
        let g = std::fs::read_to_string(format!("/proc/{ex}/task/{ex}/children")).ok()?;
        let g: u32 = g.split_whitespace().next()?.parse().ok()?;
        std::fs::read_to_string(format!("/proc/{g}/comm"))
            .ok()
            .filter(|c| c.trim() == "sleep")
            .map(|_| ex)
    })
    .expect("the guest started");
    // start-up is not idling
    std::thread::sleep(Duration::from_millis(500));
    let (c0, t0) = (cpu_ns(exec), std::time::Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (c1, t1) = (cpu_ns(exec), std::time::Instant::now());
    Command::new("kill")
        .args(["-TERM", &front.to_string()])
        .status()
        .unwrap();
    let st = mantle_testsupport::poll_until_for(Duration::from_secs(30), || c.try_wait().unwrap());
    let Some(st) = st else {
        let _ = c.kill();
        panic!("{args:?}: SIGTERM did not end the sleeping guest");
    };
    assert_eq!(st.code(), Some(128 + 15), "the guest got the SIGTERM");
    (c1 - c0) as f64 / (t1 - t0).as_nanos() as f64
}

/// A sleeping guest costs its fast-path executive under 1% of a CPU: it
/// sleeps until something happens instead of spinning after every
/// wake-up. (Before: about 35% of a CPU in a release build, 90% in this
/// debug build.)
#[test]
fn the_fast_executive_of_a_sleeping_guest_uses_under_1_percent_of_a_cpu() {
    let _serial = timing();
    for args in [
        &["--path", "fast"][..],
        &["--path", "fast", "--sleep", "--extended"][..],
    ] {
        let share = fast_idle_share(args);
        assert!(share < 0.01, "{args:?}: {:.2}% of a CPU", share * 100.0);
    }
}

/// The same at SCHED_FIFO 99 with the guest's sleep held by the
/// executive, extended mode and boost. (Before: 55-58% of a CPU, and the
/// spinning executive tripped RT throttling.)
#[test]
#[ignore = "needs root for SCHED_FIFO (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn the_fast_executive_at_priority_99_uses_under_1_percent_of_a_cpu() {
    mantle_testsupport::require_root("SCHED_FIFO 99");
    let _serial = timing();
    let share = fast_idle_share(&[
        "--path",
        "fast",
        "--priority",
        "99",
        "--sleep",
        "--extended",
        "--boost",
        "50",
    ]);
    assert!(share < 0.01, "{:.2}% of a CPU", share * 100.0);
}

/// A fast-path tree under test: `mantle run` (the reaper), its
/// executive, the guests' pids, and the file that gets mantle's stderr
/// (a file, not a pipe: guests that survive would hold a pipe open).
struct FastTree {
    front: std::process::Child,
    exec: i32,
    guests: Vec<i32>,
    stderr: PathBuf,
}

impl FastTree {
    /// Waits for `mantle run`: its exit code and what it said.
    fn wait(mut self) -> (Option<i32>, String) {
        let st = self.front.wait().unwrap();
        let e = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr);
        (st.code(), e)
    }
}

/// `mantle run --path fast ARGS -- sh -c ...` with three sleeping guests
/// (one orphaned by a subshell: adopted by the executive) and the shell.
/// The guests' pids come from a pidfile.
fn fast_tree(args: &[&str], tag: &str) -> FastTree {
    let pids = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fast-tree-{tag}-{}.pids", std::process::id()));
    let stderr = pids.with_extension("stderr");
    let _ = std::fs::remove_file(&pids);
    let p = pids.display();
    let script = format!(
        "sleep 1000 & echo $! >> {p}; (sleep 1000 & echo $! >> {p}); \
         sleep 1000 & echo $! >> {p}; echo $$ >> {p}; wait"
    );
    let c = Command::new(MANTLE)
        .args(["run", "--path", "fast", "--count=all"])
        .args(args)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let front = c.id();
    let list: Vec<i32> = mantle_testsupport::poll_until_for(Duration::from_secs(10), || {
        let s = std::fs::read_to_string(&pids).ok()?;
        let v: Vec<i32> = s.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (v.len() == 4).then_some(v)
    })
    .expect("the guests started");
    let ch = std::fs::read_to_string(format!("/proc/{front}/task/{front}/children")).unwrap();
    let exec: i32 = ch.split_whitespace().next().unwrap().parse().unwrap();
    // the orphan of the subshell is the executive's now (child subreaper)
    assert!(
        mantle_testsupport::poll_until_for(Duration::from_secs(5), || {
            (ppid(list[1].into()) == Some(exec.into())).then_some(())
        })
        .is_some(),
        "orphan {} adopted by the executive {exec}: PPid {:?}",
        list[1],
        ppid(list[1].into())
    );
    assert!(list.iter().all(|&p| !gone(p)), "guests running: {list:?}");
    let _ = std::fs::remove_file(&pids);
    FastTree {
        front: c,
        exec,
        guests: list,
        stderr,
    }
}

/// Whether every pid in `list` is gone within 10 s.
fn all_gone(list: &[i32]) -> bool {
    mantle_testsupport::poll_until_for(Duration::from_secs(10), || {
        list.iter().all(|&p| gone(p)).then_some(())
    })
    .is_some()
}

/// No `mantle-fast.EXEC.*` in the temporary directory (the door's old
/// directory; the door is an abstract socket now).
fn assert_nothing_in_tmp(exec: i32) {
    let prefix = format!("mantle-fast.{exec}.");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn kill(sig: &str, pid: i32) {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
}

/// SIGTERM to `mantle run --path fast` reaches the guest (its shell dies
/// of it: 143) and no guest survives: the reaper kills the rest.
/// (Before: 3 of 3 guests ran on, and the door's directory stayed in /tmp.)
#[test]
fn sigterm_to_fast_mantle_leaves_no_guest_and_nothing_in_tmp() {
    let t = fast_tree(&[], "term");
    let (exec, list) = (t.exec, t.guests.clone());
    kill("-TERM", t.front.id() as i32);
    let (code, e) = t.wait();
    assert_eq!(code, Some(128 + 15), "{e}");
    assert!(all_gone(&list), "guests still alive: {list:?}");
    assert_nothing_in_tmp(exec);
}

/// SIGKILL to `mantle run --path fast` (the reaper): the executive sees
/// its reaper gone and kills the guest tree itself. (Before: 2 orphans
/// ran on.)
#[test]
fn sigkill_to_fast_mantle_leaves_no_guest_and_nothing_in_tmp() {
    let mut t = fast_tree(&[], "kill");
    let (exec, list) = (t.exec, t.guests.clone());
    t.front.kill().unwrap(); // SIGKILL
    t.wait();
    assert!(all_gone(&list), "guests still alive: {list:?}");
    assert!(all_gone(&[exec]), "the executive {exec} still runs");
    assert_nothing_in_tmp(exec);
}

/// SIGKILL to the fast path's executive: the reaper kills the guest tree
/// and says so.
#[test]
fn sigkill_to_the_fast_executive_leaves_no_guest() {
    let t = fast_tree(&[], "exec");
    let (exec, list) = (t.exec, t.guests.clone());
    kill("-9", exec);
    let (code, e) = t.wait();
    assert_eq!(code, Some(125), "{e}");
    assert!(
        e.contains("killed by SIGKILL") && e.contains("guests were killed"),
        "{e}"
    );
    assert!(all_gone(&list), "guests still alive: {list:?}");
    assert_nothing_in_tmp(exec);
}

/// With --fail-open the guests outlive both: `mantle run` killed (the
/// executive serves on, then leaves them), or the executive killed (the
/// reaper leaves them; the stub makes their calls itself).
#[test]
fn with_fail_open_fast_guests_survive_their_executive() {
    for who in ["front", "exec"] {
        let mut t = fast_tree(&["--fail-open"], who);
        let (exec, list) = (t.exec, t.guests.clone());
        if who == "front" {
            t.front.kill().unwrap();
            t.wait();
        } else {
            kill("-9", exec);
            let (code, e) = t.wait();
            assert_eq!(code, Some(125), "{e}");
            assert!(e.contains("unsupervised"), "{e}");
        }
        std::thread::sleep(Duration::from_millis(1500));
        let alive: Vec<i32> = list.iter().copied().filter(|&p| !gone(p)).collect();
        for &p in &list {
            // the shell may have ended with its children: not an error
            let _ = mantle_sys::supervise::kill(p, libc::SIGKILL);
        }
        assert_eq!(alive, list, "{who}: guests killed despite --fail-open");
        assert_nothing_in_tmp(exec);
    }
}

/// Issue 29: on the fast path `--count=all` is served in the stub
/// (counters in the shared region, summed over threads with atomic adds)
/// and `--count=NAME` in the gate (the kernel notifies only the named
/// calls, no stub): either way every call of 8 threads is counted, none
/// lost. The stub is loaded only for the first: with `--count=getppid`
/// or an enforcing agent alone nothing traps (no stub, no Syscall User
/// Dispatch), and the deny still holds (the kernel filter's).
#[test]
fn fast_path_counts_in_the_stub_and_loads_no_stub_for_deny_alone() {
    let p = probe();
    for count in ["--count=all", "--count=getppid"] {
        let o = Command::new(MANTLE)
            .args(["run", "--path", "fast", count, "--json", "--"])
            .arg(p)
            .arg("threads")
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{count}: {err}");
        assert!(
            text(&o.stdout).contains("threads bad 0"),
            "{count}: {}",
            text(&o.stdout)
        );
        let row = err
            .lines()
            .filter(|l| l.contains("\"count\""))
            .find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                let rows = v["count"]["rows"].as_array().cloned().unwrap_or_default();
                rows.into_iter().find(|r| r["call"] == "getppid")
            })
            .unwrap_or_else(|| panic!("{count}: no getppid row: {err}"));
        assert_eq!(row["calls"], 8 * 200, "{count}: {row}");
        assert_eq!(row["errors"], 0, "{count}: {row}");
    }
    // the stub is preloaded when it counts every call, not for a count of
    // named calls or when only deny is asked
    let env_of = |args: &[&str]| {
        let o = Command::new(MANTLE)
            .args(["run", "--path", "fast"])
            .args(args)
            .args(["--", "sh", "-c", "echo \"[$LD_PRELOAD][$MANTLE_FAST_FD]\""])
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    assert!(env_of(&["--count=all"]).contains("stub"));
    assert!(env_of(&["--count"]).contains("stub"));
    assert!(env_of(&["--count=getppid", "--rewrite-sites"]).contains("stub"));
    assert_eq!(env_of(&["--count=getppid"]).trim(), "[][]");
    assert_eq!(env_of(&["--count=getppid,openat"]).trim(), "[][]");
    assert_eq!(env_of(&["--deny", "getppid"]).trim(), "[][]");
    let o = Command::new(MANTLE)
        .args(["run", "--path", "fast", "--deny", "getppid=EACCES", "--"])
        .arg(p)
        .arg("ppid")
        .output()
        .unwrap();
    assert_eq!(text(&o.stdout).trim(), "err 13", "{}", text(&o.stderr));
}

/// A small guest for the dispatch tests, for `secs` of wall time:
/// `spin`; `sleepy` (spins 2 ms, sleeps 1 ms in the kernel, again: it
/// blocks and wakes hundreds of times a second); `yield` (sched_yield in
/// a loop); `threads` (one spinning thread and one sleepy one).
const DGUEST_C: &str = r#"#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double end;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *spin(void *a) { while (now() < end) ; return a; }
static void *sleepy(void *a) {
    struct timespec ms = { 0, 1000000 };
    while (now() < end) { double t = now() + 0.002; while (now() < t) ; nanosleep(&ms, 0); }
    return a;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    end = now() + atof(argv[2]);
    if (!strcmp(argv[1], "spin")) spin(0);
    else if (!strcmp(argv[1], "sleepy")) sleepy(0);
    else if (!strcmp(argv[1], "yield")) { while (now() < end) sched_yield(); }
    else if (!strcmp(argv[1], "threads")) { pthread_t t; pthread_create(&t, 0, sleepy, 0); spin(0); pthread_join(t, 0); }
    else return 2;
    struct timespec c; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
    printf("%s cpu %.6f wall %.6f\n", argv[1], c.tv_sec + c.tv_nsec / 1e9, now() - end + atof(argv[2]));
    return 0;
}
"#;

fn dguest() -> &'static Path {
    static G: OnceLock<PathBuf> = OnceLock::new();
    G.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let src = dir.join(format!("dguest-{}.c", std::process::id()));
        std::fs::write(&src, DGUEST_C).unwrap();
        let bin = dir.join(format!("dguest-{}", std::process::id()));
        cc(&src, &bin, &["-pthread"]);
        bin
    })
}

/// What `mantle run -v` said of its dispatching: per guest the cgroup's
/// CPU time, the real-time time and the dispatched time (s), and the
/// switches and the switch time's p99 (ns).
struct Summary {
    cpu: Vec<f64>,
    rt: Vec<f64>,
    ran: Vec<f64>,
    switches: u64,
    switch_p99_ns: u64,
}

fn dispatch_summary(err: &str) -> Summary {
    let l = err
        .lines()
        .find(|l| l.contains("dispatched s per guest: "))
        .unwrap_or_else(|| panic!("no dispatch summary: {err}"));
    let list = |key: &str| -> Vec<f64> {
        let (_, rest) = l.split_once(key).unwrap_or_else(|| panic!("{key} in {l}"));
        rest.split(';')
            .next()
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect()
    };
    let num_before = |key: &str| -> u64 {
        l.split_once(key)
            .unwrap()
            .0
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let switch_p99_ns = l
        .split_once("; switch: ")
        .and_then(|(_, r)| r.split_once(" p99 "))
        .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    Summary {
        cpu: list("cpu s per guest: "),
        rt: list("real-time s per guest: "),
        ran: list("dispatched s per guest: "),
        switches: num_before(" switches,"),
        switch_p99_ns,
    }
}

/// A `dguest` guest: name, sched, mode.
type DGuest<'a> = (&'a str, Option<&'a str>, &'a str);

/// Runs a [dispatch] system of `dguest` guests (name, sched, mode) for 2 s
/// on CPU 0 with `-v`; its summary.
fn run_dguests(tag: &str, per: &str, guests: &[(&str, Option<&str>, &str)]) -> (Summary, String) {
    let dir = std::env::temp_dir().join(format!("mantle-dg-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut toml = format!("[dispatch]\ncpus = [0]\nquantum = \"10ms\"\nper = \"{per}\"\n");
    for (name, sched, mode) in guests {
        toml.push_str(&format!("\n[[guest]]\nname = \"{name}\"\n"));
        if let Some(s) = sched {
            toml.push_str(&format!("sched = \"{s}\"\n"));
        }
        toml.push_str(&format!(
            "command = [\"{}\", \"{mode}\", \"2\"]\n",
            dguest().display()
        ));
    }
    let f = dir.join("system.toml");
    std::fs::write(&f, toml).unwrap();
    let o = mantle(&["run", "-v", "--system", f.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{tag}: {err}");
    let _ = std::fs::remove_dir_all(&dir);
    (dispatch_summary(&err), err)
}

/// A guest runs only while it is dispatched, under every policy: each
/// guest's CPU time (its cgroup's `cpu.stat`, all its threads) is at most
/// its dispatched time plus a margin measured in the same run: each
/// switch's p99 (a leaving guest may run until its freeze is written) and
/// 5 ms (the accounting's granularity). Every scenario has a guest that
/// blocks and wakes hundreds of times a second (kernel sleeps) beside
/// spinning ones, and most one that yields: before the fix, a woken guest
/// ran undispatched by fair share until the next check (a yielder: 0.258 s
/// of CPU against 0.039 s dispatched).
#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn every_policy_runs_a_guest_only_while_it_is_dispatched() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    let scenarios: &[(&str, &str, &[DGuest])] = &[
        (
            "rr",
            "guest",
            &[
                ("spin", None, "spin"),
                ("sleepy", None, "sleepy"),
                ("yield", None, "yield"),
            ],
        ),
        (
            "fifo",
            "guest",
            &[("hi", Some("fifo 10"), "sleepy"), ("lo", None, "spin")],
        ),
        (
            "rrprio",
            "guest",
            &[
                ("r1", Some("rr 10/5ms"), "sleepy"),
                ("r2", Some("rr 10/5ms"), "spin"),
                ("be", None, "spin"),
            ],
        ),
        (
            "edf",
            "guest",
            &[
                ("e1", Some("edf 2ms/10ms"), "sleepy"),
                ("e2", Some("edf 3ms/20ms"), "spin"),
                ("be", None, "spin"),
                ("yield", None, "yield"),
            ],
        ),
        (
            "other",
            "guest",
            &[
                ("n5", Some("other 5"), "sleepy"),
                ("n0", Some("other 0"), "spin"),
                ("yield", Some("other -5"), "yield"),
            ],
        ),
        (
            "thread",
            "thread",
            &[
                ("two", None, "threads"),
                ("spin", None, "spin"),
                ("yield", None, "yield"),
            ],
        ),
        (
            "thread-edf",
            "thread",
            &[
                ("two", Some("edf 2ms/10ms"), "threads"),
                ("spin", None, "spin"),
            ],
        ),
    ];
    let mut report = String::new();
    let mut bad = Vec::new();
    for (tag, per, guests) in scenarios {
        let (s, err) = run_dguests(tag, per, guests);
        assert_eq!(s.cpu.len(), guests.len(), "{tag}: {err}");
        let margin = 0.005 + s.switches as f64 * s.switch_p99_ns as f64 / 1e9;
        for (k, (name, sched, _)) in guests.iter().enumerate() {
            let (cpu, ran) = (s.cpu[k], s.ran[k]);
            report.push_str(&format!(
                "{tag} {name} ({}): cpu {cpu:.3} s, dispatched {ran:.3} s (ratio {:.3}), real-time {:.3} s, margin {margin:.3} s\n",
                sched.unwrap_or("best effort"),
                cpu / ran.max(1e-9),
                s.rt[k]
            ));
            if cpu > ran + margin {
                bad.push(format!("{tag} {name}"));
            }
            // every guest was dispatched: one that ran its program before
            // dispatching began (its spawn waited for the cgroup mutex)
            // had 0 of both and passed unchecked (2 of 14 loaded runs).
            // Any dispatched time counts: a yielder gives its turn back at
            // once and is dispatched for only a few ms in all (9 ms seen).
            if ran <= 0.0 {
                bad.push(format!("{tag} {name}: never dispatched"));
            }
        }
    }
    eprint!("{report}");
    assert!(
        bad.is_empty(),
        "ran undispatched (or never dispatched): {bad:?}\n{report}"
    );
}

/// Two dispatching executives never share a guest's cgroup: with
/// `--fail-open` (no reaper cgroup) each made its guests' cgroups `g0`,
/// `g1` in the cgroup it was started in, and a second executive started
/// there took the same ones: each froze and thawed the other's guests and
/// counted their CPU time (measured: a guest's CPU time 0.445 s against
/// 2.0 s dispatched in one, while the other ran its own guests there).
/// Each guest prints its cgroup; the four must differ.
#[test]
#[ignore = "needs root for the guests' cgroups (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn two_dispatching_executives_never_share_a_guests_cgroup() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups for dispatching");
    let dir = std::env::temp_dir().join(format!("mantle-dshare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("system.toml");
    let guest = r#"command = ["sh", "-c", "cat /proc/self/cgroup; sleep 0.5"]"#;
    std::fs::write(
        &f,
        format!("[dispatch]\ncpus = [0]\n\n[[guest]]\nname = \"a\"\n{guest}\n\n[[guest]]\nname = \"b\"\n{guest}\n"),
    )
    .unwrap();
    let run = || {
        Command::new(MANTLE)
            .args(["run", "--fail-open", "--system", f.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, two) = (run(), run());
    let (one, two) = (
        one.wait_with_output().unwrap(),
        two.wait_with_output().unwrap(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let mut seen = Vec::new();
    for o in [&one, &two] {
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        seen.extend(
            text(&o.stdout)
                .lines()
                .filter_map(|l| l.strip_prefix("0::"))
                .map(str::to_owned),
        );
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        4,
        "guests of two executives share a cgroup: {seen:?}"
    );
}

/// A reservation holds against the host's own load: a guest under `edf
/// 2ms/10ms` beside a plain spinning process of the host's on the same
/// CPU gets at least 19% of that CPU (its own CPU time over its own wall
/// time). At SCHED_OTHER it would get its fair share of the time it is
/// dispatched, 20% of 50%; the dispatched reservation runs at SCHED_RR,
/// and its budget is charged the CPU time it received (a perf cpu-clock
/// of its cgroup), so what the executive's checks and other real-time
/// work take meanwhile is not the guest's (charged by wall time it got
/// 17.9% and 18.8% in 2 of 50 loaded runs).
#[test]
#[ignore = "needs root for the guests' cgroups and SCHED_RR (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn an_edf_reservation_gets_its_share_beside_a_host_cpu_hog() {
    let _serial = timing();
    mantle_testsupport::require_root("cgroups and real-time priorities for dispatching");
    // the host's hog, on CPU 0 like the guest, for longer than the run
    let mut hog = Command::new(dguest())
        .args(["spin", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut set = std::mem::MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: set is a zeroed cpu_set_t, a valid (empty) set; CPU_SET
    // writes within it; sched_setaffinity reads it.
    let pinned = unsafe {
        let set = set.assume_init_mut();
        libc::CPU_SET(0, set);
        libc::sched_setaffinity(hog.id() as i32, std::mem::size_of::<libc::cpu_set_t>(), set)
    };
    assert_eq!(pinned, 0, "pin the hog to CPU 0");
    let dir = std::env::temp_dir().join(format!("mantle-edfhog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("system.toml");
    std::fs::write(
        &f,
        format!(
            "[dispatch]\ncpus = [0]\n\n[[guest]]\nname = \"rt\"\nsched = \"edf 2ms/10ms\"\ncommand = [\"{}\", \"spin\", \"2\"]\n",
            dguest().display()
        ),
    )
    .unwrap();
    let o = mantle(&["run", "-v", "--system", f.to_str().unwrap()]);
    let _ = hog.kill();
    let _ = hog.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: Vec<f64> = out
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(v.len(), 2, "{out}");
    let share = v[0] / v[1];
    eprintln!(
        "edf 2ms/10ms beside a hog: {:.3} s of CPU in {:.3} s: {share:.3}",
        v[0], v[1]
    );
    assert!(
        share >= 0.19,
        "edf 2ms/10ms beside a host CPU hog got {share:.3} of the CPU\n{out}{err}"
    );
    // a lone `fifo 20` guest: real-time for at most 90% of every 100 ms
    // (the host's normal tasks, the hog, get the rest; the kernel's fair
    // server has no cause to preempt the executive), its share of the CPU
    // far above the fair share (0.5; the issue measured 0.46)
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        &f,
        format!(
            "[dispatch]\ncpus = [0]\n\n[[guest]]\nname = \"rt\"\nsched = \"fifo 20\"\ncommand = [\"{}\", \"spin\", \"2\"]\n",
            dguest().display()
        ),
    )
    .unwrap();
    let mut hog = Command::new(dguest())
        .args(["spin", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // SAFETY: as above.
    let pinned = unsafe {
        let set = set.assume_init_mut();
        libc::sched_setaffinity(hog.id() as i32, std::mem::size_of::<libc::cpu_set_t>(), set)
    };
    assert_eq!(pinned, 0, "pin the hog to CPU 0");
    let o = mantle(&["run", "-v", "--system", f.to_str().unwrap()]);
    let _ = hog.kill();
    let _ = hog.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: Vec<f64> = out
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(v.len(), 2, "{out}");
    let share = v[0] / v[1];
    let s = dispatch_summary(&err);
    let rt = s.rt[0] / s.ran[0];
    eprintln!(
        "fifo 20 beside a hog: {share:.3} of the CPU, real-time {rt:.3} of its dispatched time"
    );
    assert!(
        (0.8..=0.92).contains(&rt),
        "fifo 20: real-time for {rt:.3} of its dispatched time (bound 0.90)\n{err}"
    );
    assert!(
        share >= 0.75,
        "fifo 20 beside a host CPU hog got {share:.3} of the CPU\n{out}{err}"
    );
}

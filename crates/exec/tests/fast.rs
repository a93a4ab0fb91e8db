//! The fast path on real processes: a C guest (built with `cc`), `cat`
//! and a multi-threaded guest under [`run_fast`], and a guest that writes
//! garbage into the shared region. No root needed.

use mantle_exec::executive::Locking;
use mantle_exec::fast::{run_fast, FastError, FastOptions};
use mantle_exec::{Agent, Call, Chain, Decision, Guest, Outcome, Sysno, Times};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

mod common;

fn nr(name: &str) -> Sysno {
    Sysno::from_name(name).unwrap()
}

/// Every test that serves a guest runs under each design of the fast
/// path's executive on N CPUs (issue 31): fine and giant locking, each with
/// one unpinned serving thread and with a thread pinned on each of (up
/// to) two allowed CPUs.
fn designs() -> Vec<FastOptions> {
    common::designs()
        .into_iter()
        .map(|(locking, cpus)| FastOptions {
            locking,
            cpus,
            ..FastOptions::default()
        })
        .collect()
}

/// Runs `test` under every design, saying which on failure.
fn each_design(test: impl Fn(FastOptions)) {
    let options = designs()
        .into_iter()
        .map(|o| (o.locking, o.cpus.clone(), o))
        .collect();
    common::each_design(options, test)
}

/// Answers a fixed value for getppid.
struct Ppid(i64);
impl Agent for Ppid {
    fn name(&self) -> &str {
        "ppid"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("getppid")]
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Return(self.0)
    }
}

/// Fails every call to `nr` with `errno`, recording the path it read.
struct Deny(Sysno, i32, Arc<Mutex<Vec<String>>>);
impl Agent for Deny {
    fn name(&self) -> &str {
        "deny"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.0]
    }
    fn before(&mut self, c: &Call, g: &mut dyn Guest) -> Decision {
        if let Ok(p) = g.read_cstr(c.args[1], 4096) {
            self.2
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&p).into());
        }
        Decision::Fail(self.1)
    }
}

/// Continues a call and records the results its `after` sees.
struct Watch(Sysno, Arc<Mutex<Vec<i64>>>);
impl Agent for Watch {
    fn name(&self) -> &str {
        "watch"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.0]
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Continue
    }
    fn after(&mut self, _: &Call, _: &Decision, o: Outcome, _: Times) {
        if let Outcome::Result(r) = o {
            self.1.lock().unwrap().push(r);
        }
    }
}

fn cmd(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Builds a C guest from tests/guests/NAME.c (a file of its own per
/// call: tests run in parallel).
fn guest(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/guests/{name}.c"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fast-{name}-{}-{k}", std::process::id()));
    let st = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {}", src.display());
    out
}

#[test]
fn getppid_is_answered_by_the_agent() {
    each_design(|o| {
        let g = guest("ppid");
        let chain = Chain::new(vec![Box::new(Ppid(4242))]);
        let (st, stats) =
            run_fast(&cmd(&[g.to_str().unwrap(), "4242", "1000"]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(stats.calls, 1000, "{stats:?}");
        assert_eq!(stats.refused, 0);
    });
}

#[test]
fn continued_calls_report_real_results() {
    each_design(|o| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let chain = Chain::new(vec![Box::new(Watch(nr("getppid"), seen.clone()))]);
        let g = guest("ppid");
        let me = std::process::id() as i64;
        let (st, stats) = run_fast(
            &cmd(&[g.to_str().unwrap(), &me.to_string(), "10"]),
            chain,
            &o,
        )
        .unwrap();
        assert!(st.success(), "{st:?}");
        assert_eq!(stats.reports, 10);
        assert_eq!(*seen.lock().unwrap(), vec![me; 10]);
    });
}

#[test]
fn denied_openat_makes_cat_fail() {
    each_design(|o| {
        let paths = Arc::new(Mutex::new(Vec::new()));
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let file = dir.join("fast-cat-input");
        std::fs::write(&file, "hello\n").unwrap();
        let chain = Chain::new(vec![Box::new(Deny(
            nr("openat"),
            libc::EACCES,
            paths.clone(),
        ))]);
        let (st, _) = run_fast(&cmd(&["cat", file.to_str().unwrap()]), chain, &o).unwrap();
        assert_eq!(st.code(), Some(1));
        assert!(
            paths
                .lock()
                .unwrap()
                .iter()
                .any(|p| p == file.to_str().unwrap()),
            "{paths:?}"
        );
        // and without the agent, cat works
        let (st, _) =
            run_fast(&cmd(&["cat", file.to_str().unwrap()]), Chain::default(), &o).unwrap();
        assert!(st.success());
    });
}

#[test]
fn threads_each_get_a_slot() {
    each_design(|o| {
        let g = guest("threads");
        let chain = Chain::new(vec![Box::new(Ppid(77))]);
        let (st, stats) =
            run_fast(&cmd(&[g.to_str().unwrap(), "77", "8", "2000"]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(stats.calls, 8 * 2000 + 1, "{stats:?}");
    });
}

#[test]
fn corrupted_slots_are_refused_and_the_executive_carries_on() {
    each_design(|o| {
        let g = guest("garbage");
        let chain = Chain::new(vec![Box::new(Ppid(55))]);
        let (st, stats) = run_fast(&cmd(&[g.to_str().unwrap()]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert!(stats.bad_state >= 1, "{stats:?}");
        assert!(stats.foreign_tid >= 2, "{stats:?}");
        assert!(stats.refused >= 3, "{stats:?}");
    });
}

#[test]
fn static_guests_are_refused_with_a_typed_error() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guests/ppid.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-static");
    let ok = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: no static libc to build a static guest");
        return;
    }
    let e = run_fast(
        &cmd(&[out.to_str().unwrap(), "1", "1"]),
        Chain::default(),
        &FastOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, FastError::Static(_)), "{e}");
    assert!(e.to_string().contains("dynamically linked"));
}

#[test]
fn forks_and_execs_inside_the_guest_stay_guests() {
    each_design(|o| {
        let g = guest("ppid");
        let g = g.to_str().unwrap();
        let script = format!("{g} 77 10 && {g} 77 10 | cat && (exec {g} 77 10)");
        let chain = Chain::new(vec![Box::new(Ppid(77))]);
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        // 3 x 10 by the guests, 1 by sh itself (dash asks for its parent)
        assert!((30..=32).contains(&stats.calls), "{stats:?}");
        assert_eq!(stats.refused, 0, "{stats:?}");
    });
}

/// Rewrites the path of openat calls for one prefix (a Perform with a
/// path: the executive writes the new path into the slot's path buffer).
struct Redirect(Vec<u8>, Vec<u8>);
impl Agent for Redirect {
    fn name(&self) -> &str {
        "redirect"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("openat")]
    }
    fn before(&mut self, c: &Call, g: &mut dyn Guest) -> Decision {
        match g.read_cstr(c.args[1], 4096) {
            Ok(p) if p.starts_with(&self.0) => {
                let mut new = self.1.clone();
                new.extend_from_slice(&p[self.0.len()..]);
                Decision::Perform(mantle_exec::Perform {
                    nr: c.nr,
                    args: c.args,
                    path: Some((1, new)),
                })
            }
            _ => Decision::Continue,
        }
    }
}

#[test]
fn perform_with_a_new_path_redirects_cat() {
    each_design(|o| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-redirect");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x"), "redirected\n").unwrap();
        let chain = Chain::new(vec![Box::new(Redirect(
            b"/mantle-fast-nowhere/".to_vec(),
            format!("{}/", dir.display()).into_bytes(),
        ))]);
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-redirect.out");
        let script = format!("cat /mantle-fast-nowhere/x > {}", out.display());
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "redirected\n");
    });
}

/// The `fast_run` example (cargo test builds the examples beside the test
/// binaries): an executive in a process of its own, for the tests that
/// kill it.
fn fast_run_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("examples/fast_run"))
        .unwrap();
    assert!(
        p.exists(),
        "{} not built (cargo test builds the examples; run `cargo build -p mantle-exec --examples`)",
        p.display()
    );
    p
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    exists
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true)
}

#[test]
fn executive_death_kills_the_guests() {
    let g = guest("ppid");
    let pids = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-death.pids");
    let _ = std::fs::remove_file(&pids);
    let script = format!(
        "{g} 5 100000000000 & echo $! > {p}; echo $$ >> {p}; wait",
        g = g.display(),
        p = pids.display()
    );
    let mut exec = Command::new(fast_run_example())
        .args(["--ppid", "5", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let list: Vec<i32> = mantle_testsupport::poll_until(|| {
        let s = std::fs::read_to_string(&pids).ok()?;
        let v: Vec<i32> = s.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (v.len() == 2).then_some(v)
    })
    .expect("the guests started");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(list.iter().all(|&p| alive(p)), "guests running: {list:?}");
    exec.kill().unwrap(); // SIGKILL
    exec.wait().unwrap();
    let gone = mantle_testsupport::poll_until_for(std::time::Duration::from_secs(10), || {
        list.iter().all(|&p| !alive(p)).then_some(())
    });
    assert!(
        gone.is_some(),
        "guests still alive after the executive died: {list:?}"
    );
}

#[test]
fn signals_traps_and_pipelines_keep_working() {
    each_design(|o| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-signals.out");
        let script = format!(
            "trap 'echo usr1 >> {o}' USR1; kill -USR1 $$; printf 'a\\nb\\n' | wc -l >> {o}; \
         sleep 30 & p=$!; sleep 0.2; kill -TERM $p; wait $p; echo $? >> {o}",
            o = out.display()
        );
        let _ = std::fs::remove_file(&out);
        let seen = Arc::new(Mutex::new(Vec::new()));
        // every openat, read and wait4 goes through the executive and is continued
        let chain = Chain::new(vec![
            Box::new(Watch(nr("openat"), seen.clone())),
            Box::new(Watch(nr("read"), seen.clone())),
            Box::new(Watch(nr("wait4"), seen.clone())),
        ]);
        let t0 = std::time::Instant::now();
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "sleep was not interrupted"
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "usr1\n2\n143\n");
        assert!(stats.reports > 0 && stats.refused == 0, "{stats:?}");
    });
}

/// Fails openat with EACCES for paths under a prefix, continues others.
struct DenyUnder(Vec<u8>);
impl Agent for DenyUnder {
    fn name(&self) -> &str {
        "deny-under"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("openat")]
    }
    fn before(&mut self, c: &Call, g: &mut dyn Guest) -> Decision {
        match g.read_cstr(c.args[1], 4096) {
            Ok(p) if p.starts_with(&self.0) => Decision::Fail(libc::EACCES),
            _ => Decision::Continue,
        }
    }
}

#[test]
fn a_python_script_with_threads() {
    each_design(|o| {
        if !mantle_testsupport::have_program("python3") {
            eprintln!("skipped: no python3");
            return;
        }
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-python.out");
        let script = format!(
            r#"
import os, threading
seen = []
def run():
    seen.append(os.getppid())
ts = [threading.Thread(target=run) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
try:
    open("/mantle-denied/x")
    r = "opened"
except PermissionError:
    r = "denied"
with open("{}", "w") as f:
    f.write(f"{{sorted(set(seen))}} {{r}}\n")
"#,
            out.display()
        );
        let chain = Chain::new(vec![
            Box::new(Ppid(4242)),
            Box::new(DenyUnder(b"/mantle-denied/".to_vec())),
        ]);
        let (st, stats) = run_fast(&cmd(&["python3", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "[4242] denied\n");
    });
}

fn rewriting(o: &FastOptions) -> FastOptions {
    FastOptions {
        rewrite: true,
        ..o.clone()
    }
}

#[test]
fn rewritten_sites_answer_the_same() {
    each_design(|o| {
        // rt.c calls getppid through libc's wrapper: a rewritable site
        let g = guest("rt");
        let chain = Chain::new(vec![Box::new(Ppid(4242))]);
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-rw.out");
        let script = format!("{} 5000 > {}", g.display(), out.display());
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &rewriting(&o)).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.trim_end().ends_with("ppid=4242"), "{text}");
        assert!(stats.calls >= 6000, "{stats:?}");
    });
}

#[test]
fn rewriting_keeps_shells_signals_and_python_working() {
    each_design(|o| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-rw-signals.out");
        let _ = std::fs::remove_file(&out);
        let script = format!(
        "trap 'echo usr1 >> {o}' USR1; kill -USR1 $$; printf 'a\\nb\\n' | wc -l >> {o}; \
         sleep 30 & p=$!; sleep 0.2; kill -TERM $p; wait $p; echo $? >> {o}; \
         python3 -c 'import threading,os; t=threading.Thread(target=os.getppid); t.start(); t.join()' \
         && echo py >> {o}; cat /mantle-denied/x 2>/dev/null || echo denied >> {o}",
        o = out.display()
    );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let chain = Chain::new(vec![
            Box::new(Watch(nr("read"), seen.clone())),
            Box::new(DenyUnder(b"/mantle-denied/".to_vec())),
        ]);
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &rewriting(&o)).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "usr1\n2\n143\npy\ndenied\n"
        );
        assert_eq!(stats.refused, 0, "{stats:?}");
    });
}

#[test]
fn slots_of_dead_threads_are_taken_over() {
    each_design(|o| {
        // 4 slots; sh takes one, each run of the guest two (main + 1 thread):
        // from the second run on, slots of exited threads must be taken over
        let g = guest("threads");
        let g = g.to_str().unwrap();
        let script = format!("{g} 77 1 10 && {g} 77 1 10 && {g} 77 1 10 && {g} 77 1 10");
        let chain = Chain::new(vec![Box::new(Ppid(77))]);
        let opts = FastOptions {
            slots: 4,
            ..o.clone()
        };
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &opts).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(stats.overflow, 0, "{stats:?}");
        assert_eq!(stats.refused, 0, "{stats:?}");
        assert!(stats.calls >= 4 * 11, "{stats:?}");
    });
}

#[test]
fn children_that_lost_the_fd_find_the_region_again() {
    each_design(|o| {
        if !mantle_testsupport::have_program("python3") {
            eprintln!("skipped: no python3");
            return;
        }
        // python's subprocess closes every fd but 0-2 in the child: the stub
        // of `sh` asks the executive's door for the region again
        let script = "import subprocess, sys\n\
        r = subprocess.run(['sh', '-c', 'echo $PPID'], capture_output=True, text=True)\n\
        sys.exit(0 if (r.returncode, r.stdout) == (0, '31\\n') else print(r) or 1)\n";
        let chain = Chain::new(vec![Box::new(Ppid(31))]);
        let opts = o.clone();
        let (child, mut server) =
            mantle_exec::fast::spawn_fast(&cmd(&["python3", "-c", script]), chain, &opts).unwrap();
        // a process outside the guest tree (this test) knocks: nothing given
        let door = door_address_of(child.id());
        let mut s = mantle_exec::fast::door::Door::connect(&door).unwrap();
        let mut b = [0u8; 1];
        use std::io::Read;
        assert_eq!(
            s.read(&mut b).unwrap(),
            0,
            "refused: closed with nothing sent"
        );
        let (st, stats) = mantle_exec::fast::serve_child(child, &mut server, &opts).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        let (given, refused) = server.door_counts().unwrap();
        assert!(given >= 1, "the door gave the region ({given}, {refused})");
        assert!(refused >= 1, "and refused this test ({given}, {refused})");
        drop(server);
        assert!(
            mantle_exec::fast::door::Door::connect(&door).is_err(),
            "the door is closed with the server"
        );
    });
}

/// MANTLE_FAST_DOOR of a guest, from its environment (read again for a
/// while: a loaded CI machine once showed an environment without it, as
/// if read before the guest's exec was complete): an abstract socket's
/// name, nothing in the filesystem.
fn door_address_of(pid: u32) -> String {
    let v = mantle_testsupport::poll_until_for(std::time::Duration::from_secs(5), || {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        env.split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"MANTLE_FAST_DOOR=").map(<[u8]>::to_vec))
    })
    .expect("MANTLE_FAST_DOOR in the guest's environment");
    let a = String::from_utf8(v.to_vec()).unwrap();
    assert!(a.starts_with("@mantle-fast."), "abstract: {a}");
    a
}

/// A file for crowd.c to open (one byte at least: it reads one).
fn crowd_input() -> PathBuf {
    let f = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-crowd-input");
    std::fs::write(&f, "x\n").unwrap();
    f
}

/// Every call of crowd.c's loops continued through the executive.
fn crowd_chain() -> Chain {
    let seen = Arc::new(Mutex::new(Vec::new()));
    Chain::new(
        ["openat", "read", "close", "getppid"]
            .iter()
            .map(|n| Box::new(Watch(nr(n), seen.clone())) as Box<dyn Agent>)
            .collect(),
    )
}

/// 500 threads alive at once, each forwarding its calls: every one gets
/// a slot (the region grows to them: the high-water mark reaches 500) and
/// no call fails. Before slots grew, 64 slots made the other threads' calls
/// fail with EAGAIN (36 of 100 threads' opens, measured).
#[test]
fn five_hundred_threads_at_once_are_all_served() {
    each_design(|o| {
        let g = guest("crowd");
        let f = crowd_input();
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-crowd-threads.out");
        let script = format!(
            "{} threads 500 3 {} > {}",
            g.display(),
            f.display(),
            out.display()
        );
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), crowd_chain(), &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "threads 500 failed 0\n"
        );
        assert_eq!(stats.overflow, 0, "{stats:?}");
        assert_eq!(stats.refused, 0, "{stats:?}");
        // all 500 held a slot at once (crowd.c keeps them until all are done)
        assert!(stats.hwm >= 500, "{stats:?}");
        // 500 threads x 3 x (openat, read, close, getppid)
        assert!(stats.reports >= 500 * 3 * 4, "{stats:?}");
    });
}

/// More threads than the region has slots: the threads without one make
/// their calls unobserved (counted as overflow), and none fails.
#[test]
fn a_full_region_makes_calls_unobserved_never_fails() {
    each_design(|o| {
        let g = guest("crowd");
        let f = crowd_input();
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast-crowd-full.out");
        let script = format!(
            "{} threads 100 3 {} > {}",
            g.display(),
            f.display(),
            out.display()
        );
        let opts = FastOptions {
            slots: 16,
            ..o.clone()
        };
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), crowd_chain(), &opts).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "threads 100 failed 0\n"
        );
        assert!(stats.overflow > 0, "{stats:?}");
        assert_eq!(stats.hwm, 16, "{stats:?}");
    });
}

/// 1000 children alive at once (each blocked in a continued read until
/// the last is forked), each opening a file through the executive: all
/// exit 0.
#[test]
fn a_thousand_children_at_once_all_exit_0() {
    each_design(|o| {
        let g = guest("crowd");
        let f = crowd_input();
        let (st, stats) = run_fast(
            &cmd(&[g.to_str().unwrap(), "forks", "1000", f.to_str().unwrap()]),
            crowd_chain(),
            &o,
        )
        .unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(stats.overflow, 0, "{stats:?}");
        assert!(stats.hwm >= 1001, "{stats:?}");
    });
}

/// Processes that exit give their slots back: 40 guests run one after the
/// other reuse the same few slots instead of raising the high-water mark
/// (the executive's passes stay as short as the guest tree is wide).
#[test]
fn exited_processes_give_their_slots_back() {
    each_design(|o| {
        let g = guest("ppid");
        let script = format!(
            "for i in $(seq 40); do {} 77 3 || exit 1; done",
            g.display()
        );
        let chain = Chain::new(vec![Box::new(Ppid(77))]);
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert_eq!(stats.calls, 40 * 3 + 1, "{stats:?}");
        assert!(stats.hwm <= 4, "{stats:?}");
    });
}

/// Processes killed before they could give their slots back: the
/// executive's sweep (when the high-water mark rises, at most once a
/// second) finds their tids gone and reclaims the slots.
#[test]
fn slots_of_killed_processes_are_reclaimed() {
    each_design(|o| {
        let g = guest("ppid");
        let mark = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fast-reclaim-{}.started", std::process::id()));
        // 4 guests that keep calling, each killed once it holds a slot (dash
        // asks for its parent at start-up: a wanted call, before it writes the
        // mark); a pause past the sweep's interval; 4 more, whose claims raise
        // the mark again
        let script = format!(
        "k() {{ rm -f {m}; sh -c 'echo > {m}; exec {g} 77 100000000000' & p=$!;          while [ ! -e {m} ]; do sleep 0.01; done; kill -9 $p; wait $p; }};          k; k; k; k; sleep 1.3; k; k; k; k; rm -f {m}; {g} 77 3",
        g = g.display(),
        m = mark.display()
    );
        let chain = Chain::new(vec![Box::new(Ppid(77))]);
        let (st, stats) = run_fast(&cmd(&["sh", "-c", &script]), chain, &o).unwrap();
        assert!(st.success(), "{st:?} {stats:?}");
        assert!(stats.reclaimed >= 4, "{stats:?}");
    });
}

/// On two CPUs, a guest thread pinned to one of them is served by that
/// CPU's executive thread (its run queue's lock counts the passes), and
/// under fine locking the two threads' guests share no lock but the
/// guest tree's chain.
#[test]
fn a_pinned_guest_thread_is_served_by_its_cpus_thread() {
    let cpus: Vec<usize> = mantle_sys::os::allowed_cpus()
        .unwrap()
        .into_iter()
        .take(2)
        .map(|c| c as usize)
        .collect();
    if cpus.len() < 2 || !mantle_testsupport::have_program("taskset") {
        eprintln!("skipped: needs two allowed CPUs and taskset");
        return;
    }
    let g = guest("ppid");
    for locking in [Locking::Fine, Locking::Giant] {
        for (k, &cpu) in cpus.iter().enumerate() {
            let opts = FastOptions {
                cpus: cpus.clone(),
                locking,
                ..FastOptions::default()
            };
            let chain = Chain::new(vec![Box::new(Ppid(77))]);
            let argv = [
                "taskset",
                "-c",
                &cpu.to_string(),
                g.to_str().unwrap(),
                "77",
                "500",
            ];
            let (child, mut server) =
                mantle_exec::fast::spawn_fast(&cmd(&argv), chain, &opts).unwrap();
            let (st, stats) = mantle_exec::fast::serve_child(child, &mut server, &opts).unwrap();
            assert!(st.success(), "{st:?} {stats:?}");
            assert_eq!(stats.calls, 500, "{stats:?}");
            let locks = server.lock_stats("g");
            let of = |c: usize| {
                locks
                    .iter()
                    .find(|l| l.name == format!("runqueue cpu{c}"))
                    .unwrap()
                    .acquisitions
            };
            let (mine, other) = (of(cpu), of(cpus[1 - k]));
            // every call is one entry at least of its home; the other
            // thread enters at most to place the new owner (thread 0)
            assert!(
                mine >= 500 && other <= 5,
                "{} cpu{cpu}: {mine} entries, the other {other}: {locks:?}",
                locking.name()
            );
            assert_eq!(
                locks.iter().any(|l| l.name == "giant"),
                locking == Locking::Giant
            );
        }
    }
}

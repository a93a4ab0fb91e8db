//! The executive embedded in a test, with agents written here, on real
//! guests (no root needed: seccomp user notification is unprivileged):
//! reading guest memory on the protected path, Return, a held call
//! (Delay) that does not stop another guest from being served, a call
//! that vanishes while held (its guest killed: counted, not fatal), and a
//! guest that cannot start.

use mantle_exec::agent::{Agent, Call, Decision, Guest, Outcome, Times};
use mantle_exec::executive::{End, Executive, GuestSpec, Options};
use mantle_exec::Sysno;
use std::sync::{Arc, Mutex};

mod common;
use std::time::{Duration, Instant};

fn base() -> Options {
    Options {
        priority: None,
        sync_wake: true,
        fail_open: false,
        status_dir: None,
        realtime: false,
        ..Default::default()
    }
}

/// Every test runs under each design of the executive on N CPUs (issue
/// 31): fine and giant locking, each with one unpinned thread and with a
/// thread pinned on each of (up to) two allowed CPUs, guests spread over
/// them round robin.
fn designs() -> Vec<Options> {
    common::designs()
        .into_iter()
        .map(|(locking, cpus)| Options {
            locking,
            cpus,
            ..base()
        })
        .collect()
}

/// Runs `test` under every design, saying which on failure.
fn each_design(test: impl Fn(Options)) {
    let options = designs()
        .into_iter()
        .map(|o| (o.locking, o.cpus.clone(), o))
        .collect();
    common::each_design(options, test)
}

fn nr(n: &str) -> Sysno {
    Sysno::from_name(n).unwrap()
}

fn spec(name: &str, argv: &[&str], agents: Vec<Box<dyn Agent>>) -> GuestSpec {
    GuestSpec {
        name: name.into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        agents,
        sched: None,
        qos: None,
        enforce: Default::default(),
        rpc_to: None,
    }
}

fn quiet() -> Box<dyn FnMut(&str) + Send> {
    Box::new(|m| eprintln!("executive: {m}"))
}

/// Records the paths of openat calls, read from guest memory.
struct Paths(Arc<Mutex<Vec<String>>>);
impl Agent for Paths {
    fn name(&self) -> &str {
        "paths"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("openat")]
    }
    fn before(&mut self, c: &Call, g: &mut dyn Guest) -> Decision {
        if let Ok(p) = g.read_cstr(c.args[1], 4096) {
            self.0
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&p).into());
        }
        // a bad pointer is an error, not a crash
        assert!(g.read_cstr(8, 16).is_err());
        Decision::Continue
    }
}

#[test]
fn agents_read_guest_memory_on_the_protected_path() {
    each_design(|o| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ex = Executive::start(
            o,
            vec![spec(
                "cat",
                &["cat", "/etc/hostname"],
                vec![Box::new(Paths(seen.clone()))],
            )],
            quiet(),
        )
        .unwrap();
        let ends = ex.run();
        assert_eq!(ends[0].end, End::Exited(0));
        assert!(
            seen.lock().unwrap().iter().any(|p| p == "/etc/hostname"),
            "{seen:?}"
        );
    });
}

/// getppid returns 4242; after() sees the outcome.
struct Fixed(Arc<Mutex<Vec<Outcome>>>);
impl Agent for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("getppid")]
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Return(4242)
    }
    fn after(&mut self, _: &Call, _: &Decision, o: Outcome, _: Times) {
        self.0.lock().unwrap().push(o);
    }
}

#[test]
fn return_replaces_the_result() {
    each_design(|o| {
        let outs = Arc::new(Mutex::new(Vec::new()));
        let ex = Executive::start(
            o,
            vec![spec(
                "sh",
                &["sh", "-c", "test $PPID = 4242"],
                vec![Box::new(Fixed(outs.clone()))],
            )],
            quiet(),
        )
        .unwrap();
        let ends = ex.run();
        assert_eq!(ends[0].end, End::Exited(0));
        assert!(outs.lock().unwrap().contains(&Outcome::Result(4242)));
    });
}

/// Holds each getppid for `d` once, then lets it run.
struct Hold {
    d: Duration,
    held: Vec<u32>,
}
impl Agent for Hold {
    fn name(&self) -> &str {
        "hold"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![nr("getppid")]
    }
    fn before(&mut self, c: &Call, _: &mut dyn Guest) -> Decision {
        if self.held.contains(&c.tid) {
            Decision::Continue
        } else {
            self.held.push(c.tid);
            Decision::Delay(self.d)
        }
    }
}

#[test]
fn a_held_call_does_not_stop_other_guests() {
    each_design(|o| {
        let t0 = Instant::now();
        let done = std::env::temp_dir().join(format!("mantle-held-{}", std::process::id()));
        let _ = std::fs::remove_file(&done);
        let script = format!("echo $(date +%s%N) > {}", done.display());
        let ex = Executive::start(
            o,
            vec![
                spec(
                    "slow",
                    &["sh", "-c", "true"],
                    vec![Box::new(Hold {
                        d: Duration::from_millis(800),
                        held: vec![],
                    })],
                ),
                spec(
                    "fast",
                    &["sh", "-c", &script],
                    vec![Box::new(Fixed(Default::default()))],
                ),
            ],
            quiet(),
        )
        .unwrap();
        let ends = ex.run();
        let total = t0.elapsed();
        assert!(ends.iter().all(|e| e.end == End::Exited(0)), "{ends:?}");
        assert!(total >= Duration::from_millis(800), "{total:?}");
        // the fast guest finished while the slow one's call was held
        let fast_done = std::fs::metadata(&done).unwrap().modified().unwrap();
        let finished = std::time::SystemTime::now();
        assert!(
            finished.duration_since(fast_done).unwrap() >= Duration::from_millis(300),
            "the fast guest waited for the held call"
        );
        let _ = std::fs::remove_file(&done);
    });
}

#[test]
fn a_call_that_vanishes_while_held_is_counted_not_fatal() {
    each_design(|o| {
        let ex = Executive::start(
            o,
            vec![spec(
                "victim",
                &["sh", "-c", "true"],
                vec![Box::new(Hold {
                    d: Duration::from_millis(600),
                    held: vec![],
                })],
            )],
            quiet(),
        )
        .unwrap();
        let pid = ex.pids()[0] as i32;
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            mantle_sys::supervise::kill(pid, libc::SIGKILL).unwrap();
        });
        let ends = ex.run();
        killer.join().unwrap();
        assert_eq!(
            ends[0].end,
            End::Killed {
                signal: libc::SIGKILL,
                core: false
            }
        );
        assert_eq!(ends[0].vanished, 1, "{ends:?}");
    });
}

#[test]
fn a_guest_that_cannot_exec_is_reported() {
    each_design(|o| {
        // exec of a file that is not a program: the child's execve fails
        let f = std::env::temp_dir().join(format!("mantle-notexec-{}", std::process::id()));
        std::fs::write(&f, [0x7f, b'E', b'L', b'F', 0, 0]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ex = Executive::start(
            o,
            vec![spec("bad", &[f.to_str().unwrap()], vec![])],
            quiet(),
        )
        .unwrap();
        let ends = ex.run();
        assert!(
            matches!(ends[0].end, End::NotStarted { step: "execve", .. }),
            "{ends:?}"
        );
        let _ = std::fs::remove_file(f);
    });
}

//! Integration tests (root) for three correctness fixes of the tags kernel
//! side and lifelines (issue 8, items 8, 10 and 11), with real processes:
//!
//! * every bit of the tag table carries itself: a request from a holder of
//!   the tag on bit b gives the reader that tag, and deleting it frees it
//!   (a wrong ctz64 constant swapped bits 42..48 with 50..56);
//! * a zombie cannot take a tag, so no tag is left behind in its tid's view
//!   slot once it is reaped;
//! * a local lifeline lists receptions in the order they happened, and a
//!   shared mapping that gives a thread nothing new is not a reception.
//!
//! The actors are tests/actors/actor.c, driven as in tests/tags.rs (commands
//! on stdin, reports in a regular file; the test process is never tagged).
//! The binary holds /run/mantle-kernel.lock for its life, loads the kernel
//! side once and unloads it at exit; its tests run one at a time (one fills
//! the whole table). Outside CI, without root or a loadable kernel side,
//! each test prints `SKIP:` and why; with CI set it fails instead.

mod common;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");
const TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- setup

struct Env {
    _lock: File,
    /// 0755 temp dir: the compiled actor and the actors' report files.
    dir: PathBuf,
}

static ENV: OnceLock<Result<Env, String>> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());
static LOADED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static CLEANUP_DIR: OnceLock<PathBuf> = OnceLock::new();

fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The shared environment and this test's turn, or None (skip).
fn env() -> Option<(&'static Env, MutexGuard<'static, ()>)> {
    let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    match ENV.get_or_init(setup) {
        Ok(e) => Some((e, turn)),
        Err(why) if ci() => panic!("{why}"),
        Err(why) => {
            eprintln!("SKIP: {why}");
            None
        }
    }
}

fn setup() -> Result<Env, String> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!(
            "mantle tags integration tests need root (running as uid {euid})"
        ));
    }
    let lock = common::take_kernel_lock()?;
    let lib = common::libmantle()?;
    let dir = std::env::temp_dir().join(format!("mantle-tags-bits.{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    CLEANUP_DIR.set(dir.clone()).ok();
    // SAFETY: registering a plain extern "C" fn.
    unsafe { libc::atexit(at_exit) };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/actors/actor.c");
    let cc = Command::new("cc")
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(dir.join("actor"))
        .arg(&src)
        .args(["-lpthread", "-lrt"])
        .output()
        .map_err(|e| format!("cannot run cc (a C compiler is needed for the actors): {e}"))?;
    if !cc.status.success() {
        return Err(format!(
            "cc actor.c failed:\n{}",
            String::from_utf8_lossy(&cc.stderr)
        ));
    }
    let _ = mantle(&["tags", "down"]);
    let up = mantle(&["tags", "up", "--lib", lib.to_str().unwrap()]);
    if up.code != 0 {
        return Err(format!(
            "`mantle tags up` failed (exit {}): {}",
            up.code,
            up.stderr.trim()
        ));
    }
    LOADED.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(Env { _lock: lock, dir })
}

/// At exit, still under the lock: unload what setup loaded, remove the dir.
extern "C" fn at_exit() {
    if LOADED.load(std::sync::atomic::Ordering::SeqCst) {
        let _ = Command::new(MANTLE)
            .args(["tags", "down"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    if let Some(d) = CLEANUP_DIR.get() {
        let _ = fs::remove_dir_all(d);
    }
}

// ------------------------------------------------------------ the CLI

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn mantle(args: &[&str]) -> Out {
    let o = Command::new(MANTLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mantle");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[track_caller]
fn mantle_ok(args: &[&str]) -> String {
    let o = mantle(args);
    assert_eq!(
        o.code,
        0,
        "`mantle {}`: exit {}\nstdout: {}\nstderr: {}",
        args.join(" "),
        o.code,
        o.stdout,
        o.stderr
    );
    o.stdout
}

#[track_caller]
fn json<T: serde::de::DeserializeOwned>(args: &[&str]) -> T {
    let out = mantle_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("mantle {args:?}: {e}: {out}"))
}

/// The tags live thread `tid` holds (`tag get`: a thread object, its tags
/// as {name, ttl}).
#[track_caller]
fn tags_of(tid: u32) -> BTreeSet<String> {
    let v: Value = json(&["tag", "get", "--tid", &tid.to_string(), "--json"]);
    v["tags"]
        .as_array()
        .unwrap_or_else(|| panic!("tag get json without tags: {v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The tags in view slot `tid` itself, read through the library: the CLI
/// answers only for threads that exist, and the slot of one that is gone
/// is what must be empty.
#[track_caller]
fn slot_of(tid: u32) -> BTreeSet<String> {
    mantle_tags::Tags::open()
        .and_then(|t| t.vector_of(tid))
        .unwrap_or_else(|e| panic!("read view slot {tid}: {e}"))
        .into_iter()
        .collect()
}

fn set_of(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The TTL thread `tid` holds `tag` with (`tag threads`; unlimited is
/// null), if it holds it.
#[track_caller]
fn ttl_of(tag: &str, tid: u32) -> Option<Value> {
    let threads: Vec<Value> = json(&["tag", "threads", tag, "--json"]);
    let t = threads.iter().find(|t| t["tid"] == tid)?;
    let held = t["tags"].as_array()?.iter().find(|p| p["name"] == tag)?;
    Some(held["ttl"].clone())
}

#[track_caller]
fn lifeline(tag: &str) -> Vec<Value> {
    json(&["tag", "lifeline", tag, "--json"])
}

/// Waits (bounded) until `f` gives a value.
fn poll_until<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > TIMEOUT {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// The tags a test made, deleted when it ends (on failure too).
struct Tags(Vec<String>);

impl Tags {
    #[track_caller]
    fn create(&mut self, name: &str, opts: &[&str]) -> String {
        let mut args = vec!["tag", "create", name];
        args.extend_from_slice(opts);
        mantle_ok(&args);
        self.0.push(name.to_string());
        name.to_string()
    }
}

impl Drop for Tags {
    fn drop(&mut self) {
        for t in &self.0 {
            let _ = mantle(&["tag", "delete", t]);
        }
    }
}

// ---------------------------------------------------------------- actors

/// A running actor (tests/actors/actor.c): commands in through its stdin,
/// reports out through a regular file. Killed with its group on drop.
struct Actor {
    name: String,
    child: Child,
    ctl: ChildStdin,
    report: PathBuf,
    errlog: PathBuf,
    pos: usize,
    seq: u32,
    pid: u32,
    /// Worker thread tids.
    w: Vec<u32>,
}

impl Actor {
    /// Starts an actor with one worker; `fds`: (our fd, its fd number).
    fn spawn(env: &Env, name: &str, fds: &[(&OwnedFd, RawFd)]) -> Actor {
        // Files, never pipes: a tagged actor writing into a pipe would tag
        // whoever reads it.
        let report = env.dir.join(format!("{name}.out"));
        let errlog = env.dir.join(format!("{name}.err"));
        let mut cmd = Command::new(env.dir.join("actor"));
        cmd.arg("1")
            .stdin(Stdio::piped())
            .stdout(File::create(&report).unwrap())
            .stderr(File::create(&errlog).unwrap())
            .process_group(0);
        let fds: Vec<(RawFd, RawFd)> = fds.iter().map(|(f, d)| (f.as_raw_fd(), *d)).collect();
        // SAFETY: dup2 is async-signal-safe; every fd of ours is
        // close-on-exec, so the actor gets these and nothing else.
        unsafe {
            cmd.pre_exec(move || {
                for &(src, dst) in &fds {
                    if libc::dup2(src, dst) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let ctl = child.stdin.take().unwrap();
        let mut a = Actor {
            name: name.into(),
            child,
            ctl,
            report,
            errlog,
            pos: 0,
            seq: 0,
            pid: 0,
            w: Vec::new(),
        };
        let line = a
            .next_line(|l| l.starts_with("ready "))
            .unwrap_or_else(|| panic!("{}", a.context("never became ready")));
        let n: Vec<u32> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        a.pid = n[0];
        a.w = n[2..].to_vec();
        a
    }

    /// What went wrong, with the actor's reports and stderr.
    fn context(&self, what: &str) -> String {
        format!(
            "actor {} (pid {}): {what}\nreports:\n{}\nstderr:\n{}",
            self.name,
            self.pid,
            fs::read_to_string(&self.report).unwrap_or_default(),
            fs::read_to_string(&self.errlog).unwrap_or_default()
        )
    }

    /// The next report line (after those already seen) matching `want`.
    fn next_line(&mut self, want: impl Fn(&str) -> bool) -> Option<String> {
        poll_until(|| {
            let data = fs::read(&self.report).ok()?;
            let end = data.iter().rposition(|&b| b == b'\n')?;
            if end < self.pos {
                return None;
            }
            let text = String::from_utf8_lossy(&data[self.pos..=end]).into_owned();
            let mut at = self.pos;
            for l in text.split_inclusive('\n') {
                at += l.len();
                if want(l.trim_end()) {
                    self.pos = at;
                    return Some(l.trim_end().to_string());
                }
            }
            None
        })
    }

    /// Runs `cmd` on the worker and returns what it reported; it must succeed.
    #[track_caller]
    fn run(&mut self, cmd: &str) -> String {
        self.seq += 1;
        let seq = self.seq.to_string();
        writeln!(self.ctl, "{seq} 0 {cmd}")
            .and_then(|_| self.ctl.flush())
            .unwrap_or_else(|e| panic!("{}", self.context(&format!("command {cmd}: {e}"))));
        let line = self
            .next_line(|l| l.split(' ').next() == Some(seq.as_str()))
            .unwrap_or_else(|| panic!("{}", self.context(&format!("no answer to `{cmd}`"))));
        let mut it = line.splitn(3, ' ').skip(1);
        let (st, rest) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        if st != "ok" {
            panic!("{}", self.context(&format!("`{cmd}` failed: {rest}")));
        }
        rest.to_string()
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        // SAFETY: plain kill of the process group we created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.report);
        let _ = fs::remove_file(&self.errlog);
    }
}

/// An actor holding `ours` of a fresh pipe as its channel `p`.
fn actor_on_pipe(env: &Env, name: &str, ours: &OwnedFd) -> Actor {
    let mut a = Actor::spawn(env, name, &[(ours, 100)]);
    a.run("adopt p 100");
    a
}

/// Threads of the test process itself must never hold a tag: it would tag
/// every actor it starts afterwards.
fn assert_test_process_untagged() {
    for e in fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() {
            assert!(
                tags_of(tid).is_empty(),
                "the test process (thread {tid}) was tagged"
            );
        }
    }
}

// ================================================================= tests

/// Fills the table, so every local bit is in use; then, tag by tag, a
/// holder sends a request over a pipe to a fresh reader, which must hold
/// exactly that tag (and the tag's lifeline must record exactly that); then
/// every tag is deleted, in bit order while the later ones still live, and
/// each must be freed. With the wrong de Bruijn constant in ctz64, bits
/// 42..48 were delivered (and freed) as 50..56 and the other way round.
#[test]
fn every_bit_is_delivered_as_itself_and_freed() {
    let Some((env, _turn)) = env() else { return };
    let mut made = Tags(Vec::new());
    let refusal = loop {
        assert!(made.0.len() <= 1024, "the table never filled");
        let name = format!("bits.t{}", made.0.len());
        let o = mantle(&["tag", "create", &name, "--lifeline", "8"]);
        if o.code != 0 {
            break o;
        }
        made.0.push(name);
    };
    assert!(refusal.stderr.contains("table is full"), "{refusal:?}");
    let ls: Vec<Value> = json(&["tag", "ls", "--json"]);
    let bit_of: BTreeMap<String, u64> = ls
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["bit"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut ours: Vec<(u64, String)> = made.0.iter().map(|n| (bit_of[n], n.clone())).collect();
    ours.sort();
    let local = mantle_tags::abi::MT_GLOBAL_BITS as u64..mantle_tags::abi::MT_TAGS as u64;
    assert_eq!(
        ours.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
        local.collect::<Vec<_>>(),
        "this test's tags must take every local bit (another tag was in the table: {ls:?})"
    );

    let mut wrong = Vec::new();
    for (bit, name) in &ours {
        let (pr, pw) = pipe();
        let mut holder = actor_on_pipe(env, &format!("holder{bit}"), &pw);
        let mut reader = actor_on_pipe(env, &format!("reader{bit}"), &pr);
        drop((pr, pw));
        mantle_ok(&["tag", "set", name, "--tid", &holder.w[0].to_string()]);
        holder.run("send p request");
        assert_eq!(reader.run("recv p"), "request");
        let got = tags_of(reader.w[0]);
        // (via, receiver, sender); the sender of a "set" is the mantle
        // command that set it, which is gone: not compared.
        let records: Vec<(String, u64, u64)> = lifeline(name)
            .iter()
            .map(|r| {
                let via = r["via"].as_str().unwrap().to_string();
                let tx = if via == "set" {
                    0
                } else {
                    r["tx_tid"].as_u64().unwrap()
                };
                (via, r["rx_tid"].as_u64().unwrap(), tx)
            })
            .collect();
        let (h, r) = (holder.w[0] as u64, reader.w[0] as u64);
        let want_records = vec![("set".to_string(), h, 0), ("pipe".to_string(), r, h)];
        if got != set_of(&[name]) || records != want_records {
            wrong.push(format!(
                "bit {bit} ({name}): reader holds {got:?}; lifeline {records:?} (want {want_records:?})"
            ));
        }
    }
    assert_test_process_untagged();

    let mut not_freed = Vec::new();
    for (bit, name) in &ours {
        let o = mantle(&["tag", "delete", name]);
        if o.code != 0 {
            not_freed.push(format!("bit {bit} ({name}): {}", o.stderr.trim()));
        }
    }
    let ls: Vec<Value> = json(&["tag", "ls", "--json"]);
    let left: Vec<String> = ls
        .iter()
        .filter(|t| made.0.iter().any(|n| t["name"] == n.as_str()))
        .map(|t| format!("{} bit {} {}", t["name"], t["bit"], t["state"]))
        .collect();
    assert!(
        wrong.is_empty() && not_freed.is_empty() && left.is_empty(),
        "requests delivered as another tag:\n{}\ndeletions that failed:\n{}\nstill in the table: {left:?}",
        wrong.join("\n"),
        not_freed.join("\n")
    );
    made.0.clear();
    // Every bit is free again: the table takes as many tags as before.
    for (bit, _) in &ours {
        made.create(&format!("bits.again{bit}"), &[]);
    }
}

/// A zombie (exited, not yet reaped) has run its exit hook, which cleared
/// its view slot; a tag set on it then would stay in the slot after it is
/// reaped (the deletion sweep only visits live tasks). Setting a tag on a
/// zombie is refused as "no such thread", and the slot stays empty.
#[test]
fn a_zombie_cannot_take_a_tag() {
    let Some((env, _turn)) = env() else { return };
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.zombie", &[]);
    let mut parent = Actor::spawn(env, "parent", &[]);
    let z: u32 = parent.run("fork_child kid").parse().unwrap();
    parent.run("release kid");
    let state = || -> Option<String> {
        let st = fs::read_to_string(format!("/proc/{z}/stat")).ok()?;
        Some(
            st.rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_string(),
        )
    };
    poll_until(|| (state().as_deref() == Some("Z")).then_some(()))
        .unwrap_or_else(|| panic!("child {z} never became a zombie: {:?}", state()));

    let by_tid = mantle(&["tag", "set", &t, "--tid", &z.to_string()]);
    let by_pid = mantle(&["tag", "set", &t, "--pid", &z.to_string()]);
    let slot_while_zombie = slot_of(z);
    parent.run(&format!("waitpid {z}"));
    assert!(state().is_none(), "child {z} was reaped");
    let slot_after_reap = slot_of(z);

    let mut problems = Vec::new();
    for (how, o) in [("--tid", &by_tid), ("--pid", &by_pid)] {
        if o.code != 5 || !o.stderr.contains("no such thread") {
            problems.push(format!(
                "tag set {how} on the zombie was not refused as not found: {o:?}"
            ));
        }
    }
    if !slot_while_zombie.is_empty() {
        problems.push(format!("slot while a zombie: {slot_while_zombie:?}"));
    }
    if !slot_after_reap.is_empty() {
        problems.push(format!("slot after reaping: {slot_after_reap:?}"));
    }
    assert!(problems.is_empty(), "zombie {z}:\n{}", problems.join("\n"));
    // A live process still takes it (the refusal is for the dead only).
    mantle_ok(&["tag", "set", &t, "--pid", &parent.pid.to_string()]);
    assert_eq!(tags_of(parent.w[0]), set_of(&[&t]));
}

/// `tag lifeline` lists a local tag's receptions as they happened (by the
/// ring's sequence number), not by Lamport clock: A is given the tag, A ->
/// B, B -> C, then A -> D. D's clock (A's 3rd event + 1 = 4) is below C's
/// (5), yet D got the tag last.
#[test]
fn local_lifeline_is_in_reception_order() {
    let Some((env, _turn)) = env() else { return };
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.order", &["--lifeline", "64"]);
    let (ab_r, ab_w) = pipe();
    let (bc_r, bc_w) = pipe();
    let (ad_r, ad_w) = pipe();
    let mut a = Actor::spawn(env, "A", &[(&ab_w, 100), (&ad_w, 101)]);
    let mut b = Actor::spawn(env, "B", &[(&ab_r, 100), (&bc_w, 101)]);
    let mut c = actor_on_pipe(env, "C", &bc_r);
    let mut d = actor_on_pipe(env, "D", &ad_r);
    drop((ab_r, ab_w, bc_r, bc_w, ad_r, ad_w));
    a.run("adopt ab 100");
    a.run("adopt ad 101");
    b.run("adopt ab 100");
    b.run("adopt bc 101");

    mantle_ok(&["tag", "set", &t, "--tid", &a.w[0].to_string()]);
    a.run("send ab m1");
    assert_eq!(b.run("recv ab"), "m1");
    b.run("send bc m2");
    assert_eq!(c.run("recv p"), "m2");
    a.run("send ad m3");
    assert_eq!(d.run("recv p"), "m3");

    let ll = lifeline(&t);
    let rx: Vec<u64> = ll.iter().map(|r| r["rx_tid"].as_u64().unwrap()).collect();
    let seq: Vec<u64> = ll.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let lamport: Vec<u64> = ll.iter().map(|r| r["lamport"].as_u64().unwrap()).collect();
    let want: Vec<u64> = [&a, &b, &c, &d].iter().map(|x| x.w[0] as u64).collect();
    assert_eq!(rx, want, "receivers in the order they got the tag: {ll:#?}");
    assert!(
        seq.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers out of order: {seq:?}"
    );
    // What makes the case: the clocks themselves are not in that order.
    assert!(
        lamport[3] < lamport[2],
        "the scenario expects D's clock below C's: {lamport:?}"
    );
    assert_test_process_untagged();
}

/// A thread that maps a tagged shared object receives its tags once: a
/// mapping of a tag the thread already holds is not a reception, so a
/// process that maps a memfd many times appears once in the lifeline. Such
/// a mapping still raises a lower TTL (it is applied, just not recorded).
#[test]
fn a_mapping_that_brings_nothing_new_is_not_a_reception() {
    let Some((env, _turn)) = env() else { return };
    let mut tags = Tags(Vec::new());
    let t = tags.create("bits.shm", &["--lifeline", "64"]);
    let mut a = Actor::spawn(env, "shmA", &[]);
    let mut b = Actor::spawn(env, "shmB", &[]);
    mantle_ok(&["tag", "set", &t, "--tid", &a.w[0].to_string(), "--ttl", "5"]);
    let fd = a.run("memfd mf");
    let fd2 = a.run("memfd mf2");
    b.run(&format!("open_rw mf /proc/{}/fd/{fd}", a.pid));
    b.run(&format!("open_rw mf2 /proc/{}/fd/{fd2}", a.pid));
    let shm_records = |who: u32| -> Vec<u64> {
        lifeline(&t)
            .iter()
            .filter(|r| r["via"] == "shm" && r["rx_tid"] == who)
            .map(|r| r["ttl"].as_u64().unwrap())
            .collect()
    };

    b.run("map mf shared");
    assert_eq!(tags_of(b.w[0]), set_of(&[&t]));
    b.run("map mf shared");
    b.run("map mf shared");
    b.run("map mf2 shared");
    assert_eq!(
        shm_records(b.w[0]),
        vec![4],
        "B mapped two objects of A's four times: one reception (TTL 5 - 1)"
    );
    // B's TTL drops to 1; the next mapping gives it 4 again, unrecorded.
    mantle_ok(&["tag", "set", &t, "--tid", &b.w[0].to_string(), "--ttl", "1"]);
    b.run("map mf shared");
    assert_eq!(
        ttl_of(&t, b.w[0]),
        Some(Value::from(4)),
        "B's TTL after mapping again"
    );
    assert_eq!(shm_records(b.w[0]), vec![4], "lifeline of {t}");
    assert_test_process_untagged();
}

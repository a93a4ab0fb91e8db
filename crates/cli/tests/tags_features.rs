//! Integration tests (root) for the tag features beyond the core: expiry,
//! propagation on replies, the portable load path, lifeline formats and the
//! cluster table's validation. Real processes and the real kernel side.
//!
//! The kernel side is machine-wide state: the whole binary holds
//! /run/mantle-kernel.lock (as every mantle test and benchmark does), and the
//! tests run one at a time because some reload the kernel side. They need
//! root, so they are ignored (with the reason) unless included; included
//! without root they fail saying so. The harness is mantle-testsupport.

use mantle_testsupport::cli::{mantle_ok as ok, tags_of};
use mantle_testsupport::kernel::{self, Spec};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

/// The kernel side this binary loads (no actors: its tests use sh, python3
/// and mantle itself).
const SPEC: Spec = Spec {
    name: "tags-features",
    actors: &[],
};

/// Serialises the tests of this binary (the kernel side is shared state).
static SERIAL: Mutex<()> = Mutex::new(());

/// The libmantle.so the kernel side watches.
fn lib() -> std::path::PathBuf {
    kernel::loaded(&SPEC).lib.clone()
}

/// Runs mantle; the caller checks the outcome.
fn mantle(args: &[&str]) -> Output {
    Command::new(MANTLE)
        .args(args)
        .output()
        .expect("run mantle")
}

/// This test's turn, with the kernel side loaded (by the first test: the
/// machine-wide lock is held until the binary exits). Fails the test,
/// saying what is missing, when it cannot be loaded here.
#[track_caller]
fn setup() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    kernel::loaded(&SPEC);
    guard
}

/// Unloads and loads the kernel side again with extra `tags up` arguments
/// (and an environment variable), for the tests of load options.
fn reload(args: &[&str], env: Option<(&str, &str)>) {
    ok(&["tags", "down"]);
    let mut cmd = Command::new(MANTLE);
    cmd.args(["tags", "up"]).args(args).arg("--lib").arg(lib());
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let up = cmd.output().unwrap();
    assert!(
        up.status.success(),
        "tags up {args:?}: {}",
        String::from_utf8_lossy(&up.stderr)
    );
}

/// A tag's lifeline (JSON) and the channel of each reception.
fn lifeline_vias(name: &str) -> (serde_json::Value, Vec<String>) {
    let l: serde_json::Value =
        serde_json::from_str(&ok(&["tag", "lifeline", name, "--json"])).unwrap();
    let vias = l
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["via"].as_str().unwrap().to_string())
        .collect();
    (l, vias)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child `sh` that holds `tag` (via tag run) and waits on stdin; returns
/// the child and its pid.
fn holder(tag: &str) -> std::process::Child {
    Command::new(MANTLE)
        .args(["tag", "run", tag, "--", "sh", "-c", "read x"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn expiring_tag_stops_and_disappears() {
    let _g = setup();
    let name = "feat-expire";
    let _ = mantle(&["tag", "delete", name]);
    ok(&["tag", "create", name, "--expire", "400ms"]);
    let mut h = holder(name);
    let pid = h.id();
    wait_until("holder tagged", || tags_of(pid).contains(name));
    std::thread::sleep(Duration::from_millis(700));
    // Retired by the kernel timer: no longer resolvable; this command's
    // table open sweeps it from the holder.
    let ls = ok(&["tag", "ls", "--json"]);
    assert!(!ls.contains(name), "expired tag still listed: {ls}");
    assert!(
        !tags_of(pid).contains(name),
        "holder still has the expired tag"
    );
    let o = mantle(&["tag", "set", name, "--tid", &pid.to_string()]);
    assert_eq!(o.status.code(), Some(5), "an expired tag is unknown");
    h.stdin.take().unwrap().write_all(b"\n").unwrap();
    h.wait().unwrap();
    // bad durations are usage errors: over 24 h, no unit, not one
    for bad in ["25h", "500", "soon"] {
        assert_eq!(
            mantle(&["tag", "create", "x-bad", "--expire", bad])
                .status
                .code(),
            Some(2),
            "--expire {bad}"
        );
    }
}

/// A tagged server answers an untagged client over a connected unix stream:
/// the reply carries only tags created with --replies.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn replies_carry_only_reply_tags() {
    let _g = setup();
    let (plain, rep) = ("feat-plain", "feat-rep");
    for t in [plain, rep] {
        let _ = mantle(&["tag", "delete", t]);
    }
    ok(&["tag", "create", plain]);
    ok(&["tag", "create", rep, "--replies"]);
    let dir = std::env::temp_dir().join(format!("mantle-feat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("srv.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // The server: a thread of this (untagged) test process.
    let server = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        // SAFETY: gettid cannot fail.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        for t in [plain, rep] {
            ok(&["tag", "set", t, "--tid", &me.to_string()]);
        }
        c.write_all(b"a").unwrap();
        c.read_exact(&mut b).unwrap(); // wait for the client to finish
        for t in [plain, rep] {
            ok(&["tag", "clear", t, "--tid", &me.to_string()]);
        }
    });
    // The client: an untagged child (not a descendant of a tagged process).
    let script = format!(
        "import socket,subprocess,os\ns=socket.socket(socket.AF_UNIX)\ns.connect('{}')\ns.send(b'q')\ns.recv(1)\n\
         print(subprocess.run(['{MANTLE}','tag','get','--tid',str(os.getpid())],capture_output=True,text=True).stdout.strip())\ns.send(b'x')\n",
        path.display()
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    server.join().unwrap();
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got, rep, "the reply must carry {rep} and not {plain}");
    for t in [plain, rep] {
        ok(&["tag", "delete", t]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The portable load path (no direct fd-array loads) propagates over pipes
/// like the fast one; lifeline formats are well formed.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn compat_path_and_lifeline_formats() {
    let _g = setup();
    reload(&[], Some(("MANTLE_TAGS_COMPAT", "1")));
    let name = "feat-compat";
    ok(&["tag", "create", name, "--lifeline", "64"]);
    let out = ok(&[
        "tag",
        "run",
        name,
        "--",
        "sh",
        "-c",
        "printf 'a\\nb\\n' | sort | cat",
    ]);
    assert_eq!(out, "a\nb\n");
    let (l, vias) = lifeline_vias(name);
    assert!(
        vias.iter().filter(|v| **v == "pipe").count() >= 2,
        "pipes must carry the tag: {vias:?}"
    );
    let trace: serde_json::Value =
        serde_json::from_str(&ok(&["tag", "lifeline", name, "--format", "chrome"])).unwrap();
    let ev = trace["traceEvents"].as_array().unwrap();
    assert!(ev.iter().any(|e| e["ph"] == "f") && ev.iter().any(|e| e["ph"] == "M"));
    // This test process read the tagged pipeline's output through a pipe, so
    // it holds the tag now, and so do the mantle commands it runs: the
    // lifeline keeps growing. Compare the plot with its own title's count.
    let svg = ok(&["tag", "lifeline", name, "--format", "svg"]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let n: usize = svg
        .split("receptions)")
        .next()
        .and_then(|h| h.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .expect("count in the plot title");
    assert!(n >= l.as_array().unwrap().len());
    assert_eq!(svg.matches("<title>").count(), n, "one mark per reception");
    ok(&["tag", "delete", name]);
    // back to the default (fast) path for the other tests
    reload(&[], None);
}

#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn cluster_table_errors_are_usage_errors() {
    let _g = setup();
    let dir = std::env::temp_dir().join(format!("mantle-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad");
    std::fs::write(&bad, "req\nreq\n").unwrap();
    ok(&["tags", "down"]);
    let o = Command::new(MANTLE)
        .args(["tags", "up", "--cluster"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "duplicate global tag: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("listed twice"));
    assert!(
        !std::path::Path::new("/sys/fs/bpf/mantle/tags/maps/ctl").exists(),
        "nothing loaded on error"
    );
    let good = dir.join("good");
    std::fs::write(&good, "feat-g1 ttl=3\nfeat-g2 system\n").unwrap();
    let up = Command::new(MANTLE)
        .args(["tags", "up", "--cluster"])
        .arg(&good)
        .arg("--lib")
        .arg(lib())
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let ls: serde_json::Value = serde_json::from_str(&ok(&["tag", "ls", "--json"])).unwrap();
    let g1 = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "feat-g1")
        .expect("global tag listed");
    assert_eq!(g1["scope"], "global");
    assert_eq!(g1["bit"], 0);
    assert_eq!(g1["ttl"], 3);
    // a global tag cannot be deleted on its own; a local one starts at bit 16
    assert_eq!(mantle(&["tag", "delete", "feat-g1"]).status.code(), Some(1));
    let local: serde_json::Value =
        serde_json::from_str(&ok(&["tag", "create", "feat-l", "--json"])).unwrap();
    assert_eq!(local["bit"], 16);
    ok(&["tags", "down"]);
    let up = Command::new(MANTLE)
        .args(["tags", "up", "--lib"])
        .arg(lib())
        .output()
        .unwrap();
    assert!(up.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tag held by a thread waiting in accept: no pipe or socket data moves,
/// so nobody else gets it (no spurious propagation).
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn idle_holder_passes_nothing() {
    let _g = setup();
    let name = "feat-idle";
    let _ = mantle(&["tag", "delete", name]);
    ok(&["tag", "create", name]);
    let mut h = holder(name);
    let (mut a, mut b) = UnixStream::pair().unwrap();
    a.write_all(b"x").unwrap();
    let mut buf = [0u8; 1];
    b.read_exact(&mut buf).unwrap();
    assert!(
        tags_of(std::process::id()).is_empty(),
        "untagged traffic tagged this process"
    );
    h.stdin.take().unwrap().write_all(b"\n").unwrap();
    h.wait().unwrap();
    ok(&["tag", "delete", name]);
}

/// `tags up --no-fd-channels`: sys_exit is never attached, so pipes carry
/// nothing, while sockets still do; status says which channels are off.
#[test]
#[ignore = "needs root and the eBPF kernel side (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
fn no_fd_channels_leaves_pipes_out() {
    let _g = setup();
    reload(&["--no-fd-channels"], None);
    let name = "feat-nofd";
    ok(&["tag", "create", name, "--lifeline", "64"]);
    let links = "/sys/fs/bpf/mantle/tags/links";
    assert!(std::path::Path::new(&format!("{links}/mt_sock_send")).exists());
    assert!(!std::path::Path::new(&format!("{links}/mt_sys_exit")).exists());
    let st: serde_json::Value = serde_json::from_str(&ok(&["tags", "status", "--json"])).unwrap();
    assert_eq!(st["fd_channels"], false, "{st}");
    // A tagged writer into a pipe and a unix socket pair's reader: the
    // socket carries, the pipe does not.
    let out = ok(&[
        "tag",
        "run",
        name,
        "--",
        "sh",
        "-c",
        "echo x | cat >/dev/null; python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); b.recv(1)'",
    ]);
    assert_eq!(out, "");
    let (_, vias) = lifeline_vias(name);
    assert!(
        !vias.iter().any(|v| v == "pipe"),
        "a pipe carried the tag: {vias:?}"
    );
    assert!(
        vias.iter().any(|v| v == "unix-stream"),
        "the socket pair did not carry it: {vias:?}"
    );
    ok(&["tag", "delete", name]);
    reload(&[], None);
}

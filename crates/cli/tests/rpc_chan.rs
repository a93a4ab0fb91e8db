//! Guest ↔ guest channels (docs/exec.md "RPC channels"): two guests of one
//! `mantle run --system` connect through the executive's broker and call
//! each other through shared memory. Functional (every size up to the
//! limit both ways, oversize refused, a server with less room), hostile
//! (a server that writes garbage, answers late and dies mid-call; a client
//! that writes garbage and dies while its server waits; neither may write
//! the ctl page or resize the data), and the broker's permission check
//! (`rpc_to`), also as nobody. The guests are rpc_chan.c, linked with
//! libmantle.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    // readable by nobody; removed when the test binary exits
    D.get_or_init(|| mantle_testsupport::scratch::dir("chan"))
}

/// rpc_chan.c built against libmantle, and a copy of libmantle beside it
/// (so that nobody can load it too).
fn prog() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let lib = mantle_testsupport::build::libmantle().unwrap_or_else(|e| panic!("{e}"));
        let d = dir();
        std::fs::copy(&lib, d.join("libmantle.so")).unwrap();
        let src = d.join("rpc_chan.c");
        std::fs::write(&src, include_str!("rpc_chan.c")).unwrap();
        let bin = d.join("rpc_chan");
        mantle_testsupport::build::cc_with_libmantle("the channel test program", &src, &bin, d);
        bin
    })
}

/// One guest: name, the mode's arguments, rpc_to.
type Guest<'a> = (&'a str, &'a [&'a str], Option<&'a [&'a str]>);

/// A system file of guests.
fn system(tag: &str, guests: &[Guest]) -> PathBuf {
    let p = prog().to_str().unwrap().to_string();
    let mut t = String::new();
    for (name, args, to) in guests {
        let mut argv = vec![format!("{p:?}")];
        argv.extend(args.iter().map(|a| format!("{a:?}")));
        t += &format!(
            "[[guest]]\nname = {name:?}\ncommand = [{}]\n",
            argv.join(", ")
        );
        if let Some(to) = to {
            let q: Vec<String> = to.iter().map(|n| format!("{n:?}")).collect();
            t += &format!("rpc_to = [{}]\n", q.join(", "));
        }
        t += "\n";
    }
    let f = dir().join(format!("{tag}.toml"));
    std::fs::write(&f, t).unwrap();
    f
}

fn run(sys: &Path) -> Output {
    Command::new(MANTLE)
        .args(["run", "--system"])
        .arg(sys)
        .output()
        .unwrap()
}

fn line<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in:\n{out}"))
}

#[test]
fn outside_an_executive_there_is_no_channel() {
    let o = Command::new(prog()).arg("outside").output().unwrap();
    let e = -libc::ENOSYS;
    assert_eq!(text(&o.stdout).trim(), format!("outside {e} {e}"));
}

#[test]
fn calls_carry_every_size_both_ways_and_oversize_is_refused() {
    let rounds = 3000;
    let r = rounds.to_string();
    let s = system(
        "func",
        &[
            ("server", &["server", "2"], None),
            ("client", &["client", &r], None),
        ],
    );
    let o = run(&s);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    let c = line(&out, "client ");
    let msg = libc::EMSGSIZE;
    assert_eq!(
        c,
        format!(
            "client ok {} bad 0 over -{msg} huge -{msg} small 0 toolong -{msg} r1 0 r2 0",
            4097 + rounds
        ),
        "{out}"
    );
    // 4097 sizes + rounds + small + after + 2 on the small server; each
    // channel ended by its client's close (EPIPE)
    let pipe = libc::EPIPE;
    assert_eq!(
        line(&out, "server "),
        format!(
            "server served {} roomrefused 1 ends {pipe} {pipe}",
            4097 + rounds + 4
        ),
        "{out}"
    );
}

#[test]
fn a_hostile_server_cannot_corrupt_its_client_nor_hang_it() {
    let s = system(
        "evils",
        &[
            ("server", &["evil-server"], None),
            ("client", &["victim-client"], None),
        ],
    );
    let o = run(&s);
    let out = text(&o.stdout);
    // the evil server kills itself: mantle reports 137 for it
    assert!(out.contains("victim "), "{out}{}", text(&o.stderr));
    // it could neither resize the data nor write the ctl page
    let c = line(&out, "evil cannot:");
    let w: Vec<i32> = c
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert_eq!(w.len(), 5, "{c}");
    assert!(w.iter().all(|&e| e != 0), "some write went through: {c}");
    let v = line(&out, "victim ");
    let w: Vec<&str> = v.split_whitespace().collect();
    let proto = format!("-{}", libc::EPROTO);
    // length beyond everything, no errno, more than the room: EPROTO
    assert_eq!(&w[1..4], [&proto, &proto, &proto], "{v}");
    // a silent server: ETIMEDOUT within the timeout
    assert_eq!(w[4], format!("-{}", libc::ETIMEDOUT), "{v}");
    // the late answer is skipped, the next call gets its own
    assert_eq!((w[5], w[7]), ("4", "1"), "{v}");
    // the server killed mid-call: ECONNRESET, soon, and from then on
    let reset = format!("-{}", libc::ECONNRESET);
    assert_eq!(w[9], reset, "{v}");
    let after: f64 = w[11].parse().unwrap();
    assert!(
        after < 2.0,
        "the dead server's client waited {after} s: {v}"
    );
    assert_eq!(w[14], reset, "{v}");
}

#[test]
fn a_hostile_client_cannot_corrupt_its_server_nor_hang_it() {
    let s = system(
        "evilc",
        &[
            ("server", &["victim-server"], None),
            ("client", &["evil-client"], None),
        ],
    );
    let o = run(&s);
    let out = text(&o.stdout);
    let a = line(&out, "evilc answers");
    // a length beyond everything: answered EMSGSIZE (status << 16), not
    // received; then a 4-byte and a 5-byte request (a jumping seq is just
    // a new request), each answered with the room clamped to CHAN_MAX
    assert_eq!(
        a,
        format!("evilc answers {} 4096 4096", (libc::EMSGSIZE as u32) << 16),
        "{out}"
    );
    // the client dies while its server waits without a timeout: revoked
    assert_eq!(
        line(&out, "vserver"),
        format!("vserver got 2 lens 4 5 end -{}", libc::ECONNRESET),
        "{out}{}",
        text(&o.stderr)
    );
}

fn permission_system(tag: &str) -> PathBuf {
    system(
        tag,
        &[
            ("server", &["one-server"], Some(&[])),
            ("intruder", &["intruder"], Some(&["client"])),
            ("client", &["one-client"], Some(&["server"])),
        ],
    )
}

fn check_permissions(o: &Output) {
    let out = text(&o.stdout);
    let acc = libc::EACCES;
    assert_eq!(
        line(&out, "intruder"),
        format!("intruder connect -{acc} raw {acc} old -{acc}"),
        "{out}{}",
        text(&o.stderr)
    );
    assert_eq!(line(&out, "allowed"), "allowed 3 bcd", "{out}");
    assert_eq!(
        line(&out, "one served"),
        format!("one served, then -{}", libc::EPIPE),
        "{out}"
    );
}

#[test]
fn the_broker_connects_only_the_guests_rpc_to_allows() {
    let o = run(&permission_system("perm"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    check_permissions(&o);
}

#[test]
#[ignore = "needs root (runs mantle as nobody)"]
fn the_broker_check_holds_as_nobody() {
    mantle_testsupport::require_root("running mantle as nobody");
    let sys = permission_system("perm-nobody");
    let m = dir().join("mantle");
    std::fs::copy(MANTLE, &m).unwrap();
    for f in ["perm-nobody.toml", "rpc_chan", "libmantle.so"] {
        use std::os::unix::fs::PermissionsExt;
        let p = dir().join(f);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() | 0o555;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&m)
        .args(["run", "--system"])
        .arg(&sys)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    check_permissions(&o);
}

//! `mantle comp up|status|down` as a user runs them (docs/comp.md): the
//! cycle refusal, and (root) a running system's status with Table II per
//! cache, what `nobody` can do with its files, and `down`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

/// Both root tests run commands as nobody, whose state directory one of
/// them plants: not at the same time.
static NOBODY_DIR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn mantle(args: &[&str]) -> std::process::Output {
    Command::new(MANTLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-cli-comp-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_cyclic_system_is_refused_naming_the_cycle() {
    let d = tmp("cycle");
    let f = d.join("sys.toml");
    std::fs::write(
        &f,
        "[[component]]\nname='a'\nexec=['/bin/true']\ninvokes=['b']\n\
         [[component]]\nname='b'\nexec=['/bin/true']\ninvokes=['a']\n",
    )
    .unwrap();
    let o = mantle(&["comp", "up", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a -> b -> a"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The demo components (crates/comp/src/bin/demo.rs), built if missing.
fn demo() -> PathBuf {
    let bin = PathBuf::from(MANTLE).with_file_name("mantle-comp-demo");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "mantle-comp", "--bin", "mantle-comp-demo"])
            .current_dir(mantle_testsupport::build::workspace())
            .status()
            .unwrap();
        assert!(st.success() && bin.exists(), "build mantle-comp-demo");
    }
    bin
}

fn as_nobody(prog: &str, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", prog])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs root (/run/mantle/comp)"]
fn a_running_system_shows_table_ii_and_nobody_cannot_touch_it() {
    use std::os::unix::fs::MetadataExt;
    mantle_testsupport::require_root("/run/mantle/comp");
    let _g = NOBODY_DIR.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("up");
    let f = d.join("sys.toml");
    let demo = demo();
    std::fs::write(
        &f,
        format!(
            "[policy]\nperiod_ms=50\n\
             [[component]]\nname='a'\nexec=['{0}','relay','c']\ninvokes=['c']\n\
             stacks=1\nmax_stacks=3\ndesired_stacks=2\n\
             [[component]]\nname='c'\nexec=['{0}','echo']\n",
            demo.display()
        ),
    )
    .unwrap();
    let mut up = Command::new(MANTLE)
        .args(["comp", "up", "--json", f.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let v = loop {
        let o = mantle(&["comp", "status", "--json"]);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["policy"]["runs"].as_u64() >= Some(2) {
                break v;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no status");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(v["schema"], "mantle.comp.status/2");
    assert_eq!(v["policy"]["name"], "fixed");
    let a = &v["components"][0];
    assert_eq!(a["name"], "a");
    let tmem = a["tmem"].as_array().unwrap();
    let kinds: Vec<&str> = tmem.iter().map(|t| t["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["stack", "cbuf"]);
    for t in tmem {
        for k in [
            "allocated",
            "in_use",
            "used_since",
            "blocked",
            "desired",
            "max",
            "estimated_requests",
        ] {
            assert!(t[k].is_u64(), "{k} in {t}");
        }
        assert!(t["per_thread"].is_array());
    }
    // the fixed policy took a's stacks from 1 to 2
    assert_eq!(tmem[0]["desired"], 2);
    assert!(a["stacks"]["threads"].is_array());
    let text = mantle(&["comp", "status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("r^j") && text.contains("policy fixed"),
        "{text}"
    );

    // the policy switched on the running system, its decisions logged
    let o = mantle(&["comp", "policy", "max"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("policy max (was fixed)"),
        "{o:?}"
    );
    let st = || -> serde_json::Value {
        serde_json::from_slice(&mantle(&["comp", "status", "--json"]).stdout).unwrap()
    };
    let v = st();
    assert_eq!(
        (&v["policy"]["name"], &v["last_run"]["policy"]),
        (&"max".into(), &"max".into())
    );
    // max: a's stacks at their bound of 3
    assert!(
        v["last_run"]["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["component"] == "a" && d["kind"] == "stack" && d["desired"] == 3),
        "{v}"
    );
    let h: serde_json::Value =
        serde_json::from_slice(&mantle(&["comp", "status", "--history", "--json"]).stdout).unwrap();
    let policies: Vec<&str> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert!(
        policies.contains(&"fixed") && policies.contains(&"max"),
        "{policies:?}"
    );
    let text =
        String::from_utf8_lossy(&mantle(&["comp", "status", "--history"]).stdout).to_string();
    assert!(text.contains(", max: a/stack=3"), "{text}");
    let o = mantle(&["comp", "policy", "magic"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // nobody cannot change the policy of root's system: its own
    // directory has none, and root's request file is not writable
    let o = as_nobody(MANTLE, &["comp", "policy", "min"]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let o = as_nobody("sh", &["-c", "echo min > /run/mantle/comp/policy.request"]);
    assert!(!o.status.success(), "{o:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(st()["policy"]["name"], "max");

    // what nobody can do: read the status (0644, root's), not write it,
    // not stop the system
    let dir = std::path::Path::new("/run/mantle/comp");
    let st = std::fs::metadata(dir.join("status.json")).unwrap();
    assert_eq!((st.mode() & 0o777, st.uid()), (0o644, 0));
    let pidf = std::fs::metadata(dir.join("manager.pid")).unwrap();
    assert_eq!(pidf.uid(), 0);
    assert_eq!(pidf.mode() & 0o022, 0, "pid file writable by others");
    for target in ["status.json", "manager.pid", "evil"] {
        let p = dir.join(target);
        let o = as_nobody("sh", &["-c", &format!("echo x > '{}'", p.display())]);
        assert!(!o.status.success(), "nobody wrote {p:?}");
    }
    // nobody looks in its own runtime directory: no system there
    let o = as_nobody(MANTLE, &["comp", "down"]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    let o = as_nobody(MANTLE, &["comp", "status", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "null", "{o:?}");
    assert!(
        up.try_wait().unwrap().is_none(),
        "nobody stopped the system"
    );

    let o = mantle(&["comp", "down"]);
    assert!(o.status.success(), "{o:?}");
    let t0 = Instant::now();
    while up.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "comp up did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = mantle(&["comp", "status"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("no system of components is up"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
#[ignore = "needs root (plants a directory for nobody)"]
fn a_state_directory_planted_by_another_user_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    mantle_testsupport::require_root("chown a directory");
    let _g = NOBODY_DIR.lock().unwrap_or_else(|e| e.into_inner());
    // nobody without XDG_RUNTIME_DIR uses /tmp/mantle-comp-UID: plant it
    // as root, world-writable, with a pid for `down` to signal
    let uid = String::from_utf8(
        Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let d = PathBuf::from(format!("/tmp/mantle-comp-{}", uid.trim()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(d.join("manager.pid"), "1").unwrap();
    std::fs::write(d.join("status.json"), "{}").unwrap();
    for cmd in ["down", "status"] {
        let o = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args(["env", "-u", "XDG_RUNTIME_DIR", MANTLE, "comp", cmd])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{cmd}: {o:?}");
        assert!(err.contains("refusing to use it"), "{cmd}: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

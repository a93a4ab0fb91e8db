//! `mantle instr` on linked files, through the CLI: rewrite (runtime
//! found beside the mantle binary), verify, plan --json, the runtime
//! path check, bad input, and a rewritten program run as `nobody`; and
//! C++ objects with COMDAT section groups (report, link, verify, a
//! corrupted group's exit code).

use mantle_testsupport::build::{run_cc, workspace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn profile() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The mantle binary and libmantle_instr_rt.so beside it, built by cargo.
fn mantle() -> PathBuf {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "mantle-cli", "-p", "mantle-instr-rt"])
            .current_dir(workspace());
        if !profile().ends_with("debug") {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "cargo build mantle");
    });
    profile().join("mantle")
}

fn tmpdir(name: &str) -> PathBuf {
    // Under one scratch directory (mode 0755: `nobody` runs from it),
    // removed when the test binary exits.
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| mantle_testsupport::scratch::dir("instr-linked-cli"));
    let d = root.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mantle_run(args: &[&Path]) -> Output {
    Command::new(mantle()).args(args).output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn build(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let prog = dir.join("prog");
    run_cc(
        "basic.c",
        Command::new("cc")
            .args(["-O2", "-fno-inline", "-I"])
            .arg(&src)
            .arg(src.join("basic.c"))
            .arg("-o")
            .arg(&prog),
    );
    prog
}

#[test]
fn rewrite_verify_plan() {
    let dir = tmpdir("rvp");
    let prog = build(&dir);
    let out = dir.join("prog.instr");
    let map = dir.join("prog.map");
    let p = Path::new;
    let o = mantle_run(&[
        p("instr"),
        p("rewrite"),
        &prog,
        p("-o"),
        &out,
        p("--all"),
        p("--map"),
        &map,
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("ok      fib"), "{}", text(&o));
    // Executable like its original; needs nothing in the environment.
    let o = mantle_run(&[p("instr"), p("verify"), &prog, &out]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("same: exit status"), "{}", text(&o));
    let prof = dir.join("prof.json");
    let r = Command::new(&out)
        .env("MANTLE_INSTR_MAP", &map)
        .env("MANTLE_INSTR_OUT", &prof)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(7));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    let fib = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "fib")
        .unwrap();
    assert_eq!(fib["calls"], 8361);
    // verify tells programs apart.
    let o = mantle_run(&[p("instr"), p("verify"), &out, p("/bin/true")]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    // plan --json on the linked file.
    let o = mantle_run(&[p("instr"), p("plan"), &prog, p("-f"), p("fib"), p("--json")]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "mantle-instr-report/1");
    assert_eq!(v["functions"][0]["name"], "fib");
    assert_eq!(v["functions"][0]["status"], "instrumented");
}

#[test]
fn bad_input_and_unsafe_runtime_are_refused() {
    let dir = tmpdir("bad");
    let prog = build(&dir);
    let p = Path::new;
    let out = dir.join("x");
    // A runtime in a directory anyone can write to could be replaced.
    let open_dir = dir.join("open");
    std::fs::create_dir_all(&open_dir).unwrap();
    let rt = open_dir.join("libmantle_instr_rt.so");
    std::fs::copy(profile().join("libmantle_instr_rt.so"), &rt).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = mantle_run(&[
        p("instr"),
        p("rewrite"),
        &prog,
        p("-o"),
        &out,
        p("--all"),
        p("--runtime"),
        &rt,
    ]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("writable by group or others"),
        "{}",
        text(&o)
    );
    assert!(!out.exists());
    // A corrupted program header table.
    let mut data = std::fs::read(&prog).unwrap();
    data[56] = 0xff; // e_phnum
    data[57] = 0x7f;
    let bad = dir.join("bad");
    std::fs::write(&bad, &data).unwrap();
    let o = mantle_run(&[p("instr"), p("rewrite"), &bad, p("-o"), &out, p("--all")]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("malformed ELF"), "{}", text(&o));
}

/// What `nobody` gets: the rewritten program (written with the caller's
/// umask, like cc's output) runs as nobody with the same output, loading
/// the runtime root owns; nobody cannot change that runtime.
#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn rewritten_program_as_nobody() {
    mantle_testsupport::require_root("setpriv");
    let dir = tmpdir("nobody");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = build(&dir);
    let out = dir.join("prog.instr");
    let p = Path::new;
    let o = mantle_run(&[p("instr"), p("rewrite"), &prog, p("-o"), &out, p("--all")]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let as_nobody = |exe: &Path| {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(exe)
            .output()
            .unwrap()
    };
    let (a, b) = (as_nobody(&prog), as_nobody(&out));
    assert_eq!(a.stdout, b.stdout, "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(a.status.code(), b.status.code());
    let rt = profile().join("libmantle_instr_rt.so");
    let w = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["sh", "-c", "echo x >> \"$0\""])
        .arg(&rt)
        .output()
        .unwrap();
    assert!(!w.status.success(), "nobody could write {}", rt.display());
}

/// Two C++ objects sharing an inline function in a COMDAT group, through
/// the CLI: the JSON report names the group, the map's ids continue, the
/// linked program verifies, and a corrupted group is exit 2 with the
/// reason.
#[test]
fn comdat_objects() {
    let dir = tmpdir("comdat");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let p = Path::new;
    let map = dir.join("prog.map");
    let mut objs = Vec::new();
    for unit in ["comdat2_a", "comdat2_b"] {
        let obj = dir.join(format!("{unit}.o"));
        run_cc(
            unit,
            Command::new("c++")
                .args(["-O2", "-fPIC", "-c"])
                .arg(src.join(format!("{unit}.cpp")))
                .arg("-o")
                .arg(&obj),
        );
        let out = dir.join(format!("{unit}.instr.o"));
        let o = mantle_run(&[
            p("instr"),
            p("rewrite"),
            &obj,
            p("-o"),
            &out,
            p("--all"),
            p("--map"),
            &map,
            p("--json"),
        ]);
        assert_eq!(code(&o), 0, "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let f = v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "_Z6sharedl")
            .unwrap();
        assert_eq!(f["comdat"], "_Z6sharedl", "{f}");
        assert_eq!(f["status"], "instrumented", "{f}");
        objs.push((obj, out));
    }
    // Ids continue across the two objects: 7 functions, 7 ids.
    let ids: std::collections::BTreeSet<String> = std::fs::read_to_string(&map)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 7, "{ids:?}");
    let link = |exe: &Path, a: &Path, b: &Path, rt: bool| {
        let mut c = Command::new("c++");
        c.arg(a).arg(b).arg("-o").arg(exe);
        if rt {
            c.arg(profile().join("libmantle_instr_rt.a"))
                .arg("-lpthread");
        }
        run_cc("comdat2", &mut c);
    };
    let orig = dir.join("orig");
    let new = dir.join("new");
    link(&orig, &objs[0].0, &objs[1].0, false);
    link(&new, &objs[0].1, &objs[1].1, true);
    let o = mantle_run(&[p("instr"), p("verify"), &orig, &new]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    // A group whose flags say more than COMDAT.
    let mut bad = std::fs::read(&objs[0].0).unwrap();
    let at = {
        use object::read::elf::{FileHeader, SectionHeader};
        let h = object::elf::FileHeader64::<object::Endianness>::parse(&*bad).unwrap();
        let e = h.endian().unwrap();
        let g = h
            .sections(e, &*bad)
            .unwrap()
            .iter()
            .find(|s| s.sh_type(e) == object::elf::SHT_GROUP)
            .unwrap();
        g.sh_offset(e) as usize
    };
    bad[at..at + 4].copy_from_slice(&6u32.to_le_bytes());
    let bad_obj = dir.join("bad.o");
    std::fs::write(&bad_obj, bad).unwrap();
    let o = mantle_run(&[
        p("instr"),
        p("rewrite"),
        &bad_obj,
        p("-o"),
        &dir.join("bad.instr.o"),
        p("--all"),
    ]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("section group"), "{}", text(&o));
}

/// The runtime's environment, the trace limit among it, is in --help.
#[test]
fn help_names_the_runtime_environment() {
    let o = mantle_run(&[
        Path::new("instr"),
        Path::new("rewrite"),
        Path::new("--help"),
    ]);
    let t = text(&o);
    assert_eq!(code(&o), 0, "{t}");
    for v in [
        "MANTLE_INSTR_OUT",
        "MANTLE_INSTR_TRACE=",
        "MANTLE_INSTR_TRACE_MAX",
        "MANTLE_INSTR_MAP",
    ] {
        assert!(t.contains(v), "{v} missing from --help:\n{t}");
    }
}

/// `verify` reads standard input as a filter does (no --stdin, or
/// `--stdin -`) and gives both programs the same bytes: cat and tac
/// differ on two lines, and agree on them with themselves.
#[test]
fn verify_reads_standard_input() {
    use std::io::Write;
    let verify = |a: &str, b: &str, extra: &[&str]| -> Output {
        let mut c = Command::new(mantle());
        c.args(["instr", "verify"])
            .args(extra)
            .args([a, b])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"a\nb\n").unwrap();
        child.wait_with_output().unwrap()
    };
    for extra in [&[][..], &["--stdin", "-"][..]] {
        let o = verify("/bin/cat", "/usr/bin/tac", extra);
        assert_eq!(code(&o), 1, "{extra:?}: {}", text(&o));
        assert!(text(&o).contains("standard output differs"), "{}", text(&o));
        let o = verify("/bin/cat", "/bin/cat", extra);
        assert_eq!(code(&o), 0, "{extra:?}: {}", text(&o));
        assert!(text(&o).contains("4 bytes of output"), "{}", text(&o));
    }
}

//! `mantle prof` and privilege (issue 33): recording is checked by
//! capability, not by uid. A non-root user holding CAP_BPF and
//! CAP_PERFMON records; nobody, and uid 0 in `unshare -Ur` (all
//! capabilities of its own namespace, none that count), are refused with
//! exit 4 naming what is missing, before anything is loaded; a report of
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

#[test]
#[ignore = "needs root (setpriv to nobody, ambient capabilities)"]
fn nobody_is_refused_with_4_naming_the_capabilities() {
    mantle_testsupport::require_root("setpriv to nobody");
    let d = nobody_dir("nobody");
    let out = d.join("s");
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .arg(MANTLE)
        .args(record_args(&out)));
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("missing: CAP_BPF, CAP_PERFMON"), "{err}");
    assert!(!err.contains("libbpf"), "refused before loading: {err}");
    assert!(!out.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root (unshare -Ur)"]
fn uid_0_in_a_user_namespace_is_refused_with_4() {
    mantle_testsupport::require_root("unshare -Ur");
    let d = nobody_dir("userns");
    let out = d.join("s");
    for as_nobody in [false, true] {
        let mut c = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(NOBODY).arg("unshare");
            c
        } else {
            Command::new("unshare")
        };
        let (code, err) = run(c.args(["-Ur", MANTLE]).args(record_args(&out)));
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
    // one capability alone is not enough, and the message says which
    let (code, err) = run(Command::new("setpriv")
        .args(NOBODY)
        .args(["--inh-caps=+perfmon", "--ambient-caps=+perfmon", MANTLE])
        .args(record_args(&d.join("t"))));
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("missing: CAP_BPF") && !err.contains("CAP_PERFMON,"),
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

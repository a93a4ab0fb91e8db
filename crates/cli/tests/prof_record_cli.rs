//! `mantle prof record` as a command wrapper (issue 33): the command's
//! exit status is passed on, a command that cannot run is refused before
//! recording, `record --` alone and `--off-cpu` with `--continuous` are
//! usage errors, and an output that
//! cannot be written is found before the command runs (its parents are
//! never created).

use std::path::PathBuf;
use std::process::{Command, Stdio};

const MANTLE: &str = env!("CARGO_BIN_EXE_mantle");

fn mantle(args: &[&str]) -> (i32, String) {
    let o = Command::new(MANTLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mantle");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mantle-prof-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    d
}

#[test]
#[ignore = "needs root (records; loads the sample path)"]
fn the_commands_exit_status_is_passed_on() {
    mantle_testsupport::require_root("recording");
    let _lock = mantle_testsupport::lock::take_kernel_lock().expect("kernel lock");
    let d = tmp("status");
    let s = d.join("s");
    let (code, err) = mantle(&[
        "prof",
        "record",
        "-q",
        "-o",
        s.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 7",
    ]);
    assert_eq!(code, 7, "{err}");
    assert!(
        s.join("meta.json").exists(),
        "the session is written all the same"
    );
    let t = d.join("t");
    let (code, err) = mantle(&[
        "prof",
        "record",
        "-q",
        "-o",
        t.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[ignore = "needs root (the command is checked after the capabilities)"]
fn a_command_that_cannot_run_is_refused_before_recording() {
    mantle_testsupport::require_root("recording");
    let d = tmp("norun");
    let s = d.join("s");
    let (code, err) = mantle(&[
        "prof",
        "record",
        "-q",
        "-o",
        s.to_str().unwrap(),
        "--",
        "/etc/passwd",
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("cannot run /etc/passwd"), "{err}");
    assert!(!s.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// `--off-cpu` sums blocked time over the whole recording: refused with
/// `--continuous` before anything is loaded or written (no privilege
/// needed to hear it).
#[test]
fn off_cpu_with_continuous_is_a_usage_error() {
    let d = tmp("offcont");
    let c = d.join("c");
    let (code, err) = mantle(&[
        "prof",
        "record",
        "-q",
        "--off-cpu",
        "--continuous",
        c.to_str().unwrap(),
        "--rotate",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--off-cpu records one session, not with --continuous"),
        "{err}"
    );
    assert!(!c.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn record_double_dash_alone_is_a_usage_error() {
    let d = tmp("dash");
    let s = d.join("s");
    let (code, err) = mantle(&["prof", "record", "-q", "-o", s.to_str().unwrap(), "--"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no command given after --"), "{err}");
    assert!(!s.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_unwritable_output_is_refused_before_the_command_runs() {
    let d = tmp("out");
    let marker = d.join("ran");
    let cmd = format!("touch {}", marker.display());
    let missing = d.join("no/such/dir/s");
    let (code, err) = mantle(&[
        "prof",
        "record",
        "-q",
        "-o",
        missing.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("create a session in"), "{err}");
    assert!(!d.join("no").exists(), "parents are not created");
    assert!(!marker.exists(), "the command did not run");
    std::fs::remove_dir_all(&d).unwrap();
}

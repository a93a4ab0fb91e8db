//! `mantle run --offload`: the CLI's checks before it becomes the command
//! (the mechanism's tests: crates/offload/tests/offload.rs).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn mantle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mantle"))
}

#[test]
fn a_bootstrap_cpu_that_is_not_online_is_a_usage_error() {
    let o = mantle()
        .args(["run", "--offload", "--bootstrap-cpu", "999", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.starts_with("mantle: --bootstrap-cpu: CPU 999 is not online"),
        "{e}"
    );
}

#[test]
fn a_bootstrap_cpu_outside_the_affinity_is_a_usage_error() {
    // taskset narrows the allowed CPUs to 0 as a cpuset would
    let o = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_mantle")])
        .args(["run", "--offload", "--bootstrap-cpu", "1", "--", "true"])
        .output()
        .unwrap();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let want = if online.trim() == "0" {
        "is not online"
    } else {
        "is not allowed"
    };
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{o:?}");
}

#[test]
fn a_static_program_is_refused_clearly() {
    // the dynamic loader itself is a static executable
    let ld = "/lib64/ld-linux-x86-64.so.2";
    let o = mantle()
        .args(["run", "--offload", "--", ld, "--version"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(126), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is statically linked"),
        "{o:?}"
    );
}

#[test]
fn mantle_becomes_the_command_and_ends_as_it_does() {
    let o = mantle()
        .args(["run", "--offload", "--", "sh", "-c", "echo hi; exit 7"])
        .output()
        .unwrap();
    assert_eq!(
        (o.status.code(), o.stdout.as_slice()),
        (Some(7), &b"hi\n"[..]),
        "{o:?}"
    );
    let o = mantle()
        .args(["run", "--offload", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{o:?}");
    let o = mantle()
        .args(["run", "--offload", "--", "no-such-program-here"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    let o = mantle()
        .args(["run", "--offload", "--deny", "unlink", "--", "true"])
        .output()
        .unwrap();
    // a malformed `run` command line is the wrapper's 125 (README)
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot be used with"),
        "{o:?}"
    );
}

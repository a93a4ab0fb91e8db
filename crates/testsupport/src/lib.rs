//! Test support for mantle's integration tests: a dev-dependency of the
//! crates whose tests touch the kernel side, never linked into mantle.
//!
//! It is the one place for what those tests share, so that each test file
//! keeps only its tests and their own helpers:
//! * the rule for tests that need root or a kernel feature ([`require_root`],
//!   [`require`]): such a test is marked `#[ignore = "needs root ..."]`, so a
//!   plain `cargo test` lists it as ignored with its reason; when it is run
//!   anyway (`-- --include-ignored`, as `scripts/test.sh` does as root) and
//!   the requirement is unmet, it fails naming what is missing. Nothing
//!   skips by returning early: a skip that passes hides itself;
//! * what `CI` means ([`ci`]), once;
//! * the machine-wide kernel lock ([`lock`]);
//! * building the mantle binary's companions: libmantle.so and the C actors
//!   ([`build`]);
//! * scratch directories that go when the test binary exits ([`scratch`]);
//! * the kernel side loaded once per test binary ([`kernel`]);
//! * running the CLI and reading its JSON ([`cli`]);
//! * the actor driver: actors started, commanded, their reports collected
//!   ([`actor`]).

pub mod actor;
pub mod build;
pub mod cli;
pub mod kernel;
pub mod lock;
pub mod scratch;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `CI` is set to something that means yes: set, non-empty, and
/// neither "0" nor "false". `.ci/run` exports CI=1; `scripts/test.sh` then
/// refuses to run without root (an ignored test would hide the gap).
pub fn ci() -> bool {
    ci_value_means_yes(std::env::var_os("CI").as_deref())
}

/// The rule of [`ci`], on a value of `CI` (None: unset).
fn ci_value_means_yes(v: Option<&std::ffi::OsStr>) -> bool {
    v.is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The effective uid of the test process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Fails the test unless it runs as root. For tests marked
/// `#[ignore = "needs root ..."]`: they run only when asked for, and then
/// an unmet requirement is a failure that says so, never a silent pass.
#[track_caller]
pub fn require_root(what: &str) {
    let uid = euid();
    assert!(
        uid == 0,
        "{what} needs root (running as uid {uid}): run it as root, e.g. `sudo scripts/test.sh`"
    );
}

/// Fails the test unless `ok`: `what` is the missing feature, `why` what
/// the test needs it for.
#[track_caller]
pub fn require(what: &str, ok: bool, why: &str) {
    assert!(ok, "missing here: {what} (needed {why})");
}

/// Whether `prog` is on PATH.
pub fn have_program(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails unless every `(program, Debian package)` is installed. Tests never
/// install anything: `scripts/setup.sh` does.
#[track_caller]
pub fn require_programs(progs: &[(&str, &str)]) {
    let missing: Vec<String> = progs
        .iter()
        .filter(|(p, _)| !have_program(p))
        .map(|(p, pkg)| format!("{p} (Debian package {pkg})"))
        .collect();
    assert!(
        missing.is_empty(),
        "missing here: {} (scripts/setup.sh installs them)",
        missing.join(", ")
    );
}

/// How long the harness waits for anything an actor or a command should do.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Waits (bounded by `timeout`) until `f` gives a value, polling fast at
/// first and then every few milliseconds.
pub fn poll_until_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut nap = Duration::from_micros(100);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(4));
    }
}

/// [`poll_until_for`] with [`TIMEOUT`].
pub fn poll_until<T>(f: impl FnMut() -> Option<T>) -> Option<T> {
    poll_until_for(TIMEOUT, f)
}

#[cfg(test)]
mod tests {
    use super::ci_value_means_yes as yes;
    use std::ffi::OsStr;

    #[test]
    fn ci_is_set_non_empty_and_not_0_or_false() {
        assert!(!yes(None));
        for no in ["", "0", "false"] {
            assert!(!yes(Some(OsStr::new(no))), "CI={no:?}");
        }
        for y in ["1", "true", "yes", "gitlab"] {
            assert!(yes(Some(OsStr::new(y))), "CI={y:?}");
        }
    }
}

//! What the tests run besides themselves: the mantle binary, libmantle.so
//! and the C actors (crates/cli/tests/actors/*.c, plain programs that do IPC
//! on command and know nothing of mantle), built with `cc`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (this crate lives in crates/testsupport).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of the test binary's profile (target/debug or
/// target/release): a test binary lives in its deps/.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().unwrap_or(deps).to_path_buf()
}

/// The mantle binary of the same build as the running test. Cargo builds it
/// for every integration test of mantle-cli (its `CARGO_BIN_EXE_mantle`,
/// known only when compiling the test, is this same path).
pub fn mantle_bin() -> PathBuf {
    let bin = profile_dir().join("mantle");
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p mantle-cli`)",
        bin.display()
    );
    bin
}

/// libmantle.so next to the mantle binary under test, built if missing
/// (`cargo test -p mantle-cli` alone does not build the cdylib).
pub fn libmantle() -> Result<PathBuf, String> {
    let lib_dir = profile_dir();
    let lib = lib_dir.join("libmantle.so");
    if !lib.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "mantle-api", "--lib"])
            .current_dir(workspace());
        if !lib_dir.ends_with("debug") {
            cmd.arg("--release");
        }
        let st = cmd.status().map_err(|e| format!("run cargo: {e}"))?;
        if !st.success() || !lib.exists() {
            return Err(format!(
                "{} is missing and `cargo build -p mantle-api` did not make it",
                lib.display()
            ));
        }
    }
    Ok(lib)
}

/// The source of actor `name`.
pub fn actor_src(name: &str) -> PathBuf {
    workspace()
        .join("crates/cli/tests/actors")
        .join(format!("{name}.c"))
}

/// Compiles the actors `names` into `bin` (in parallel). `selftag` links
/// against libmantle in `lib_dir` (it tags itself through the C API).
pub fn compile_actors(names: &[&str], bin: &Path, lib_dir: &Path) -> Result<(), String> {
    let include = workspace().join("include");
    let mut jobs = Vec::new();
    for name in names {
        let mut cmd = Command::new("cc");
        cmd.args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(bin.join(name))
            .arg(actor_src(name))
            .args(["-lpthread", "-lrt"])
            .stderr(Stdio::piped());
        if *name == "selftag" {
            cmd.arg(format!("-I{}", include.display()))
                .arg(format!("-L{}", lib_dir.display()))
                .arg("-lmantle")
                .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot run cc (a C compiler is needed for the actors): {e}"))?;
        jobs.push((name, child));
    }
    for (name, child) in jobs {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "cc {name}.c failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// Runs `cmd` (a `cc` command line) to build `what`; fails the test with
/// cc's messages if cc cannot run or fails.
#[track_caller]
pub fn run_cc(what: &str, cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc to build {what} (a C compiler is needed): {e}"));
    assert!(
        out.status.success(),
        "cc {what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the C program `src` into `bin` against mantle's headers and the
/// libmantle.so in `lib_dir` (found there at run time through its rpath),
/// with warnings as errors; fails the test naming `what` if cc does.
#[track_caller]
pub fn cc_with_libmantle(what: &str, src: &Path, bin: &Path, lib_dir: &Path) {
    run_cc(
        what,
        Command::new("cc")
            .args(["-O1", "-Wall", "-Werror"])
            .arg(format!("-I{}", workspace().join("include").display()))
            .arg(src)
            .arg(format!("-L{}", lib_dir.display()))
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
            .arg("-lmantle")
            .arg("-o")
            .arg(bin),
    );
}

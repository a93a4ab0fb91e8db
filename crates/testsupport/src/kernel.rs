//! The kernel side, loaded once per test binary: the first test that needs
//! it takes the kernel lock (held until the binary exits), builds
//! libmantle.so and the actors the binary asked for, reloads the kernel
//! side (`tags down`, `tags up --lib libmantle.so`), and registers an exit
//! hook that unloads it and removes the temp dir, still under the lock.
//!
//! A test binary loads it one way only: the first [`loaded`] call's `Spec`
//! wins. If setup fails (not root, no C compiler, the kernel side does not
//! load) every test that asks for it fails with the same reason.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::cli::{mantle, mantle_cmd};

/// How a test binary wants the kernel side.
pub struct Spec {
    /// Names the temp dir (`/tmp/mantle-NAME.PID`).
    pub name: &'static str,
    /// The actors to compile into `DIR/bin`.
    pub actors: &'static [&'static str],
}

/// The loaded kernel side and the binary's shared temp dir.
pub struct Loaded {
    /// Held for the life of the test binary: serialises every user of the
    /// kernel side (benchmarks, other test runs).
    _lock: File,
    /// Shared temp dir (0755, so actors running as nobody can use it):
    /// the compiled actors in bin/, and whatever the tests put there.
    pub dir: PathBuf,
    /// The libmantle.so the kernel side watches (`tags up --lib`).
    pub lib: PathBuf,
}

impl Loaded {
    /// The compiled actor `name`.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }
}

static ENV: OnceLock<Result<Loaded, String>> = OnceLock::new();
static LOADED: AtomicBool = AtomicBool::new(false);
static CLEANUP_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The kernel side, loaded (first call) as `spec` says. Fails the test,
/// naming what is missing, when it cannot be: tests that call this are the
/// ones marked `#[ignore = "needs root ..."]`.
#[track_caller]
pub fn loaded(spec: &Spec) -> &'static Loaded {
    match ENV.get_or_init(|| setup(spec)) {
        Ok(l) => l,
        Err(why) => panic!("the kernel side is not available to this test: {why}"),
    }
}

fn setup(spec: &Spec) -> Result<Loaded, String> {
    // Without root nothing below touches the kernel side, so the lock is
    // not needed to decide that.
    let euid = crate::euid();
    if euid != 0 {
        return Err(format!(
            "mantle's kernel-side tests need root (running as uid {euid})"
        ));
    }
    let lock = crate::lock::take_kernel_lock()?;
    let lib = crate::build::libmantle()?;
    let lib_dir = lib.parent().unwrap().to_path_buf();

    let dir = std::env::temp_dir().join(format!("mantle-{}.{}", spec.name, std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).map_err(|e| format!("create {}: {e}", bin.display()))?;
    for d in [&dir, &bin] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    }
    CLEANUP_DIR.set(dir.clone()).ok();
    // SAFETY: registers a plain extern "C" fn with no captured state; it
    // runs at process exit, after the tests.
    unsafe { libc::atexit(at_exit) };
    crate::build::compile_actors(spec.actors, &bin, &lib_dir)?;

    let _ = mantle(&["tags", "down"]);
    let up = mantle(&["tags", "up", "--lib", lib.to_str().unwrap()]);
    if up.code != 0 {
        return Err(format!(
            "`mantle tags up` failed (exit {}): {}",
            up.code,
            up.stderr.trim()
        ));
    }
    LOADED.store(true, Ordering::SeqCst);
    Ok(Loaded {
        _lock: lock,
        dir,
        lib,
    })
}

/// At exit, still under the lock: unload what setup loaded, remove the dir.
extern "C" fn at_exit() {
    if LOADED.load(Ordering::SeqCst) {
        let _ = mantle_cmd()
            .args(["tags", "down"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    if let Some(d) = CLEANUP_DIR.get() {
        let _ = fs::remove_dir_all(d);
    }
}

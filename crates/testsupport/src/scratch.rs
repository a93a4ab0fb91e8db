//! Scratch directories for a test binary's files that outlive one test:
//! programs built once and shared by every test of the binary, which must
//! be readable and executable by `nobody` too.
//!
//! Why /tmp and not cargo's target/tmp: a fresh clone may sit under a
//! directory `nobody` cannot traverse (root's home is 0700). Why not a
//! guard with `Drop`: the directory is held by a `static`, and statics are
//! never dropped. So the directory is named by the test binary's pid,
//! removed at exit by an `atexit` handler (the test harness leaves through
//! `exit`, which runs them), and a later run removes what a killed run left
//! behind: any sibling whose pid no longer lives.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Directories to remove at exit.
static AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

extern "C" fn remove_at_exit() {
    // A poisoned lock still holds the list; remove what it names.
    let mut list = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    let dirs = std::mem::take(&mut *list);
    drop(list);
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A fresh directory `/tmp/mantle-test-{name}-{pid}`, mode 0755, removed
/// when the test binary exits; leftovers of dead earlier runs of the same
/// `name` are removed first.
pub fn dir(name: &str) -> PathBuf {
    let tmp = std::env::temp_dir();
    let prefix = format!("mantle-test-{name}-");
    remove_dead(&tmp, &prefix);
    let dir = tmp.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .expect("make the scratch directory readable by nobody");
    let mut list = AT_EXIT.lock().unwrap_or_else(|p| p.into_inner());
    if list.is_empty() {
        // SAFETY: remove_at_exit is an extern "C" fn with no arguments that
        // neither unwinds (it ignores every error) nor calls exit.
        unsafe { libc::atexit(remove_at_exit) };
    }
    list.push(dir.clone());
    dir
}

/// Removes `dir/{prefix}{pid}` entries whose pid is not a live process.
fn remove_dead(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_runs_leftover_goes_and_a_live_ones_stays() {
        let tmp = std::env::temp_dir();
        let prefix = format!("mantle-test-selftest{}-", std::process::id());
        // pid_max is at most 2^22: this pid cannot be alive.
        let dead = tmp.join(format!("{prefix}{}", 1u32 << 23));
        let live = tmp.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir_all(&dead).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        remove_dead(&tmp, &prefix);
        assert!(!dead.exists(), "a dead run's directory stays");
        assert!(live.exists(), "a live run's directory went");
        std::fs::remove_dir_all(&live).unwrap();
    }
}

//! What the executive's integration tests share: the designs of the
//! executive on N CPUs (issue 31) that every test runs under.

use mantle_exec::executive::Locking;

/// Fine and giant locking, each with one unpinned thread (no CPUs) and
/// with a thread pinned on each of (up to) two allowed CPUs.
pub fn designs() -> Vec<(Locking, Vec<usize>)> {
    let cpus: Vec<usize> = mantle_sys::os::allowed_cpus()
        .unwrap()
        .into_iter()
        .take(2)
        .map(|c| c as usize)
        .collect();
    let mut out = Vec::new();
    for locking in [Locking::Fine, Locking::Giant] {
        for cpus in [vec![], cpus.clone()] {
            out.push((locking, cpus));
        }
    }
    out
}

/// Runs `test` with each of `options` (one per design, built by the
/// caller from [`designs`]), saying which design failed.
pub fn each_design<O>(options: Vec<(Locking, Vec<usize>, O)>, test: impl Fn(O)) {
    for (locking, cpus, o) in options {
        let what = format!("{} locking on cpus {cpus:?}", locking.name());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(o)));
        if let Err(e) = r {
            eprintln!("failed with {what}");
            std::panic::resume_unwind(e);
        }
    }
}

//! What the kernel enforces for a guest, on either path: the part of the
//! agents' work that must hold against a guest that attacks its own
//! process (turns off its hooks, writes the fast path's shared memory,
//! races a second thread, execs a static binary).
//!
//! Three mechanisms, none of which lives in the guest's address space:
//! * **the seccomp filter's refusals** ([`Enforcement::refuse`]): calls
//!   that fail in the kernel, before any notification. While an agent
//!   enforces, the io_uring family (its operations are not system calls,
//!   so nothing else would see an `IORING_OP_OPENAT`) unless
//!   `--allow-io-uring`; while a redirect is on, the mount and namespace
//!   families (a guest with CAP_SYS_ADMIN in its namespace must not
//!   unmount what hides OLD, or join another namespace to see it: the
//!   mount family, setns and chroot).
//! * **the filter's notifications to a listener**: `--deny` (a family at
//!   a time, [`crate::family`]); the protected executive or, on the fast
//!   path, the enforcement gate ([`crate::fast::gate`]) decides. Deny
//!   needs a listener rather than a refusal because of the guest's start
//!   (see [`crate::agents::deny`]).
//! * **the redirect's mount namespace** ([`mantle_sys::mountns`]).
//!
//! Pure: this module decides what to ask of the kernel; the launcher asks.

use crate::agents::deny::Deny;
use crate::agents::redirect::Redirects;
use crate::family;
use std::path::PathBuf;

/// What the launcher makes the kernel enforce for one guest.
#[derive(Clone, Debug, Default)]
pub struct Enforcement {
    /// Calls the filter fails with an errno (never notified).
    pub refuse: Vec<(u32, i32)>,
    /// Whether any agent enforces (deny or redirect).
    pub enforcing: bool,
    /// Whether io_uring was allowed by the user while enforcing.
    pub io_uring_allowed: bool,
    redirects: Redirects,
}

impl Enforcement {
    /// From the parsed `--deny` and `--redirect` specs.
    pub fn new(deny: &Deny, redirects: Redirects, allow_io_uring: bool) -> Enforcement {
        let enforcing = !deny.is_empty() || !redirects.is_empty();
        let mut refuse = Vec::new();
        let add = |refuse: &mut Vec<(u32, i32)>, fam: &str, errno: i32| {
            if let Some(f) = family::by_name(fam) {
                for n in f.numbers() {
                    // a user's own --deny of the family keeps its errno
                    // (the agent decides it through the listener)
                    if deny.errno_of(n).is_none() {
                        refuse.push((n.0, errno));
                    }
                }
            }
        };
        if enforcing && !allow_io_uring {
            add(&mut refuse, "io_uring", libc::EPERM);
        }
        if !redirects.is_empty() {
            add(&mut refuse, "mount", libc::EPERM);
            // setns into another mount namespace (/proc/1/ns/mnt) or
            // chroot into another process's root (/proc/1/root) would show
            // OLD to a guest with the capability; unshare stays (a new
            // namespace copies the binds, and umount2 is refused)
            for n in ["setns", "chroot"] {
                if let Some(s) = crate::sysno::Sysno::from_name(n) {
                    if deny.errno_of(s).is_none() {
                        refuse.push((s.0, libc::EPERM));
                    }
                }
            }
        }
        Enforcement {
            refuse,
            enforcing,
            io_uring_allowed: enforcing && allow_io_uring,
            redirects,
        }
    }

    /// The redirect's specs (binds are checked against the file system by
    /// [`Enforcement::binds`]).
    pub fn binds_spec(&self) -> &Redirects {
        &self.redirects
    }

    /// The redirect's binds, (NEW, OLD), checked on this file system.
    pub fn binds(&self) -> Result<Vec<(PathBuf, PathBuf)>, String> {
        self.redirects.binds()
    }

    /// One line per mechanism, for `mantle run -v`.
    pub fn describe(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.refuse.is_empty() {
            let names: Vec<String> = self
                .refuse
                .iter()
                .map(|&(n, _)| crate::sysno::Sysno(n).name().into_owned())
                .collect();
            v.push(format!("refused by the filter: {}", names.join(" ")));
        }
        if self.io_uring_allowed {
            v.push("io_uring allowed (--allow-io-uring): its operations bypass every agent".into());
        }
        if !self.redirects.is_empty() {
            v.push("redirect: a private mount namespace with binds".into());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deny(specs: &[&str]) -> Deny {
        let mut d = Deny::default();
        for s in specs {
            d.add(s).unwrap();
        }
        d
    }

    fn refused(e: &Enforcement, fam: &str) -> bool {
        family::by_name(fam)
            .unwrap()
            .numbers()
            .all(|n| e.refuse.iter().any(|r| r.0 == n.0))
    }

    #[test]
    fn io_uring_is_refused_while_anything_enforces_unless_allowed() {
        let none = Enforcement::new(&Deny::default(), Redirects::default(), false);
        assert!(!none.enforcing && none.refuse.is_empty());
        let d = Enforcement::new(&deny(&["getppid"]), Redirects::default(), false);
        assert!(d.enforcing && refused(&d, "io_uring") && !refused(&d, "mount"));
        let allowed = Enforcement::new(&deny(&["getppid"]), Redirects::default(), true);
        assert!(allowed.refuse.is_empty() && allowed.io_uring_allowed);
        let mut r = Redirects::default();
        r.add("/data=/srv").unwrap();
        let e = Enforcement::new(&Deny::default(), r, false);
        for fam in ["io_uring", "mount"] {
            assert!(refused(&e, fam), "{fam}");
        }
        let nr = |n| crate::sysno::Sysno::from_name(n).unwrap().0;
        assert!(e.refuse.iter().any(|r| r.0 == nr("setns")));
        assert!(e.refuse.iter().any(|r| r.0 == nr("chroot")));
        assert!(!e.refuse.iter().any(|r| r.0 == nr("unshare")));
        // every refusal is EPERM
        assert!(e.refuse.iter().all(|r| r.1 == libc::EPERM));
    }

    #[test]
    fn a_users_deny_of_a_refused_family_keeps_its_errno() {
        let mut r = Redirects::default();
        r.add("/data=/srv").unwrap();
        let e = Enforcement::new(&deny(&["mount=EROFS"]), r, false);
        let mount = family::by_name("mount").unwrap();
        assert!(mount
            .numbers()
            .all(|n| !e.refuse.iter().any(|r| r.0 == n.0)));
        assert!(refused(&e, "io_uring"));
    }
}

//! `--redirect OLD=NEW`: the guest sees NEW at OLD, like a bind mount,
//! because it is one: the launcher puts the guest in a private mount
//! namespace with NEW bound over OLD (`mantle_sys::mountns`) before the
//! filter and the exec. This module only parses and checks the specs;
//! nothing is rewritten per call and no agent sits in the chain.
//!
//! Why a mount (docs/exec.md "Redirect"): the kernel then resolves every
//! path of every call the same way, once: the open, stat, exec, chdir,
//! readlink, access and `*at` families, `..`, symbolic links, relative
//! paths from a cwd or a directory fd under OLD, `/proc/self/root`, and
//! io_uring's opens. A path rewritten by the executive in a guest's memory
//! could be changed by another guest thread between the check and the
//! kernel's read, and `..` and symbolic links would need the file system;
//! a mount has neither problem.
//!
//! Rules: OLD and NEW are absolute, exist, and are both directories or
//! both not; OLD is not `/` (a process's root does not follow a mount
//! made over it: use a container for that) and contains no `..`; binds
//! are made shortest OLD first, so `/data=/a` with `/data/sub=/b` binds
//! /b over /a/sub (which must exist in /a). A guest cannot undo a bind:
//! the filter refuses the mount family while a redirect is on, and a
//! guest that is not root has no capability in the namespace.

use super::{SpecError, Why};
use std::path::PathBuf;

/// Linux's PATH_MAX, with the NUL: a path has at most 4095 bytes.
pub const PATH_MAX: usize = 4096;

/// The calls that look a path up (what trace and count watch by default,
/// and what a redirect changes), with the index of each path
/// argument (x86-64 argument order). Written from the calls' manual pages.
pub const FAMILY: &[(&str, &[usize])] = &[
    // open
    ("open", &[0]),
    ("openat", &[1]),
    ("openat2", &[1]),
    ("creat", &[0]),
    // stat
    ("stat", &[0]),
    ("lstat", &[0]),
    ("newfstatat", &[1]),
    ("statx", &[1]),
    ("statfs", &[0]),
    ("access", &[0]),
    ("faccessat", &[1]),
    ("faccessat2", &[1]),
    ("readlink", &[0]),
    ("readlinkat", &[1]),
    ("getxattr", &[0]),
    ("lgetxattr", &[0]),
    ("listxattr", &[0]),
    ("llistxattr", &[0]),
    // exec
    ("execve", &[0]),
    ("execveat", &[1]),
    // directories
    ("chdir", &[0]),
    ("chroot", &[0]),
    ("mkdir", &[0]),
    ("mkdirat", &[1]),
    ("rmdir", &[0]),
    ("mknod", &[0]),
    ("mknodat", &[1]),
    ("unlink", &[0]),
    ("unlinkat", &[1]),
    ("rename", &[0, 1]),
    ("renameat", &[1, 3]),
    ("renameat2", &[1, 3]),
    ("link", &[0, 1]),
    ("linkat", &[1, 3]),
    ("symlink", &[1]),
    ("symlinkat", &[2]),
    // changes to an inode named by path
    ("truncate", &[0]),
    ("chmod", &[0]),
    ("fchmodat", &[1]),
    ("chown", &[0]),
    ("lchown", &[0]),
    ("fchownat", &[1]),
    ("utime", &[0]),
    ("utimes", &[0]),
    ("futimesat", &[1]),
    ("utimensat", &[1]),
    ("setxattr", &[0]),
    ("lsetxattr", &[0]),
    ("removexattr", &[0]),
    ("lremovexattr", &[0]),
    ("inotify_add_watch", &[1]),
];

/// The components of an absolute path, each with the offset just past it.
fn components(p: &[u8]) -> impl Iterator<Item = (&[u8], usize)> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        while at < p.len() && p[at] == b'/' {
            at += 1;
        }
        if at >= p.len() {
            return None;
        }
        let start = at;
        while at < p.len() && p[at] != b'/' {
            at += 1;
        }
        let c = &p[start..at];
        if c != b"." {
            return Some((c, at));
        }
    })
}

/// The `--redirect` specs of a guest.
#[derive(Clone, Debug, Default)]
pub struct Redirects {
    /// (OLD components, NEW as written without trailing slashes).
    rules: Vec<(Vec<Vec<u8>>, Vec<u8>)>,
}

impl Redirects {
    /// Adds one `OLD=NEW` spec (syntax only; [`Redirects::binds`] checks
    /// the file system).
    pub fn add(&mut self, spec: &str) -> Result<(), SpecError> {
        let err = |why: &str| SpecError::new("redirect", spec, Why::BadRedirect(why.into()));
        let (old, new) = spec
            .split_once('=')
            .ok_or_else(|| err("expected OLD=NEW, two absolute paths"))?;
        let (old, new) = (old.as_bytes(), new.as_bytes());
        if !old.starts_with(b"/") || !new.starts_with(b"/") {
            return Err(err("OLD and NEW must be absolute paths"));
        }
        if old.contains(&0) || new.contains(&0) {
            return Err(err("a path cannot contain a NUL byte"));
        }
        let comps: Vec<Vec<u8>> = components(old).map(|(c, _)| c.to_vec()).collect();
        if comps.iter().any(|c| c == b"..") {
            return Err(err("OLD cannot contain `..`"));
        }
        if comps.is_empty() {
            return Err(err(
                "OLD cannot be / (a process's root does not follow a mount over it)",
            ));
        }
        let mut new = new.to_vec();
        while new.len() > 1 && new.last() == Some(&b'/') {
            new.pop();
        }
        if new.len() >= PATH_MAX {
            return Err(err("NEW is longer than PATH_MAX"));
        }
        let new_comps: Vec<&[u8]> = components(&new).map(|(c, _)| c).collect();
        if new_comps == comps.iter().map(|c| c.as_slice()).collect::<Vec<_>>() {
            return Err(err("OLD and NEW are the same path"));
        }
        if self.rules.iter().any(|r| r.0 == comps) {
            return Err(SpecError::new(
                "redirect",
                spec,
                Why::Repeated(String::from_utf8_lossy(old).into_owned()),
            ));
        }
        self.rules.push((comps, new));
        // shortest OLD first: a bind inside another's OLD comes after it
        self.rules.sort_by_key(|r| r.0.len());
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The binds, (NEW, OLD), in the order to make them, with OLD and NEW
    /// checked on this file system: both exist, and are both directories
    /// or both not.
    pub fn binds(&self) -> Result<Vec<(PathBuf, PathBuf)>, String> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::new();
        for (old, new) in &self.rules {
            let mut o = PathBuf::from("/");
            for c in old {
                o.push(std::ffi::OsStr::from_bytes(c));
            }
            let n = PathBuf::from(std::ffi::OsStr::from_bytes(new));
            let kind = |p: &PathBuf| {
                std::fs::metadata(p)
                    .map(|m| m.is_dir())
                    .map_err(|e| format!("--redirect: {}: {e}", p.display()))
            };
            let (ko, kn) = (kind(&o)?, kind(&n)?);
            if ko != kn {
                return Err(format!(
                    "--redirect {}={}: one is a directory and the other is not (a bind needs two of a kind)",
                    o.display(),
                    n.display()
                ));
            }
            out.push((n, o));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_specs_say_why() {
        let mut r = Redirects::default();
        for bad in [
            "/data",
            "data=/x",
            "/data=x",
            "=/x",
            "/data=",
            "/a/../b=/c",
            "/=/jail",
            "//=/jail",
            "/data=/data/",
            "/data\0=/x",
        ] {
            let e = r.add(bad).unwrap_err();
            assert_eq!(e.option, "redirect", "{bad:?}");
            assert!(matches!(e.why, Why::BadRedirect(_)), "{bad:?}: {e}");
        }
        let long = format!("/data=/{}", "x".repeat(PATH_MAX));
        assert!(r.add(&long).is_err());
        r.add("/data=/x").unwrap();
        assert!(matches!(
            r.add("/data/=/y").unwrap_err().why,
            Why::Repeated(_)
        ));
    }

    #[test]
    fn every_family_call_exists_and_its_path_indices_are_arguments() {
        for &(name, idx) in FAMILY {
            assert!(
                crate::sysno::Sysno::from_name(name).is_some(),
                "{name} is not a call"
            );
            assert!(!idx.is_empty() && idx.len() <= 2, "{name}");
            assert!(idx.iter().all(|&i| i < 6), "{name}");
        }
    }

    #[test]
    fn binds_come_shortest_first_and_need_two_of_a_kind() {
        let base = std::env::temp_dir().join(format!("mantle-redirects-{}", std::process::id()));
        let (d1, d2, f) = (base.join("d1"), base.join("d2"), base.join("f"));
        std::fs::create_dir_all(d1.join("sub")).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        std::fs::write(&f, "").unwrap();
        let s = |p: &PathBuf| p.display().to_string();
        let mut r = Redirects::default();
        r.add(&format!("{}={}", s(&d1.join("sub")), s(&d2)))
            .unwrap();
        r.add(&format!("{}/={}", s(&d1), s(&d2))).unwrap();
        let b = r.binds().unwrap();
        assert_eq!(
            b,
            vec![(d2.clone(), d1.clone()), (d2.clone(), d1.join("sub"))]
        );
        let mut r = Redirects::default();
        r.add(&format!("{}={}", s(&d1), s(&f))).unwrap();
        assert!(r.binds().unwrap_err().contains("two of a kind"));
        let mut r = Redirects::default();
        r.add(&format!("{}={}", s(&base.join("nope")), s(&d2)))
            .unwrap();
        assert!(r.binds().is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}

//! `--redirect OLD=NEW`: paths under OLD are rewritten to the same place
//! under NEW in the calls that look a path up (the open, stat, exec and
//! directory-change families: the paper's "enshrouding" of file access).
//! `cat /data/x` with `--redirect /data=/srv/other` reads /srv/other/x.
//!
//! Choices, each for a reason:
//! * **Whole components.** OLD matches a path whose leading components
//!   are OLD's: `/data` matches `/data`, `/data/` and `/data/x`, not
//!   `/database`. Empty and `.` components are skipped on both sides
//!   (`//data/./x` matches `/data`), `..` is not interpreted (that needs the
//!   file system: symbolic links). OLD may not contain `..` or `=`.
//! * **Longest OLD wins** when several match (`/data=/a` and
//!   `/data/sub=/b` send `/data/sub/x` to `/b/x`); one rewrite per path,
//!   the result is not matched again.
//! * **Absolute paths only.** A relative path is resolved against the
//!   guest's cwd or a directory fd, which this pure agent cannot see.
//!   Since `chdir` is in the family, a guest that changes into OLD lands
//!   in NEW, and relative lookups from there stay in NEW; a guest
//!   *started* with its cwd under OLD, or holding a directory fd opened
//!   before the executive, is not redirected. The rewrite is not hidden:
//!   `getcwd` after such a `chdir` reports NEW. For the same reason the
//!   dirfd of the `*at` calls does not matter: an absolute path ignores
//!   it. A NULL path (`utimensat(fd, NULL, ...)`, i.e. `futimens`) is not
//!   a path and is left alone.
//! * **Never Continue after a rewrite.** The agent answers
//!   `Perform { path: Some((index, new)) }`: the executive makes the call
//!   with the bytes checked here, so the guest cannot swap the path after
//!   the check. Calls whose path does not match continue unchanged (the
//!   fast common case); this makes redirect enshrouding, not
//!   confinement: a guest that races to change its path buffer after the
//!   check, or reaches OLD through a symbolic link or `..`, sees OLD. Use
//!   a mount namespace (or deny) to confine.
//! * **Two-path calls** (rename, link and their `at` forms) can carry one
//!   replacement (`Perform::path` is one path): when exactly one of the
//!   two paths matches it is rewritten; when both do, the call fails with
//!   EXDEV ("not on the same file system"), which `mv` answers by copying
//!   and unlinking, each of which is then redirected. `ln` reports it.
//!   symlink's target is content, not looked up: only its link path is.
//! * **Guest memory is a claim.** A path that cannot be read fails the
//!   call with EFAULT (the kernel's answer too); a path longer than
//!   PATH_MAX (or made longer by the rewrite) fails with ENAMETOOLONG;
//!   if the call vanished while its path was read, the call is failed
//!   (the executive's answer is dropped anyway).
//! * Whether a path can perform a given call (execve or chdir cannot be
//!   performed from another process; the fast path performs it in the
//!   guest) is the path's business: it answers ENOSYS otherwise.

use super::{SpecError, Why};
use crate::agent::{Agent, Call, Decision, Guest, GuestError, Perform};
use crate::sysno::Sysno;
use std::collections::BTreeMap;

/// Linux's PATH_MAX, with the NUL: a path has at most 4095 bytes.
pub const PATH_MAX: usize = 4096;

/// The calls whose paths are rewritten, with the index of each path
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

/// One OLD=NEW rule.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    /// OLD's components (no empty or `.` ones).
    old: Vec<Vec<u8>>,
    /// NEW without trailing slashes (`""` for `/`).
    new: Vec<u8>,
}

/// Rewrites path prefixes in the family's calls.
#[derive(Debug)]
pub struct Redirect {
    /// Longest OLD first.
    rules: Vec<Rule>,
    family: BTreeMap<Sysno, &'static [usize]>,
}

impl Default for Redirect {
    fn default() -> Self {
        let family = FAMILY
            .iter()
            .filter_map(|&(n, idx)| Some((Sysno::from_name(n)?, idx)))
            .collect();
        Redirect {
            rules: Vec::new(),
            family,
        }
    }
}

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

impl Redirect {
    /// Adds one `OLD=NEW` spec.
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
            return Err(err(
                "OLD cannot contain `..` (it is matched without the file system)",
            ));
        }
        let mut new = new.to_vec();
        while new.last() == Some(&b'/') {
            new.pop();
        }
        if new.len() >= PATH_MAX {
            return Err(err("NEW is longer than PATH_MAX"));
        }
        let new_comps: Vec<&[u8]> = components(&new).map(|(c, _)| c).collect();
        if new_comps == comps.iter().map(|c| c.as_slice()).collect::<Vec<_>>() {
            return Err(err("OLD and NEW are the same path"));
        }
        if self.rules.iter().any(|r| r.old == comps) {
            return Err(SpecError::new(
                "redirect",
                spec,
                Why::Repeated(String::from_utf8_lossy(old).into_owned()),
            ));
        }
        self.rules.push(Rule { old: comps, new });
        // longest first; stable, so equal lengths keep the user's order
        self.rules.sort_by_key(|r| std::cmp::Reverse(r.old.len()));
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The path `p` rewritten, if a rule matches it.
    pub fn rewrite(&self, p: &[u8]) -> Option<Vec<u8>> {
        if !p.starts_with(b"/") {
            return None;
        }
        'rules: for r in &self.rules {
            let mut end = 0;
            let mut it = components(p);
            for want in &r.old {
                match it.next() {
                    Some((c, e)) if c == want.as_slice() => end = e,
                    _ => continue 'rules,
                }
            }
            let rest = &p[end..];
            let mut out = r.new.clone();
            // `rest` is empty or starts with `/` (it begins where a
            // component ended, or is the whole absolute path when OLD is `/`)
            if rest.is_empty() && out.is_empty() {
                out.push(b'/');
            }
            out.extend_from_slice(rest);
            return Some(out);
        }
        None
    }

    /// Reads path argument `i` and rewrites it: Ok(None) when there is
    /// nothing to do, Err(errno) when the call must fail.
    fn one(&self, call: &Call, i: usize, guest: &mut dyn Guest) -> Result<Option<Vec<u8>>, i32> {
        let addr = call.args[i];
        if addr == 0 {
            return Ok(None);
        }
        let p = guest.read_cstr(addr, PATH_MAX).map_err(|e| match e {
            GuestError::TooLong { .. } => libc::ENAMETOOLONG,
            _ => libc::EFAULT,
        })?;
        match self.rewrite(&p) {
            Some(n) if n.len() >= PATH_MAX => Err(libc::ENAMETOOLONG),
            r => Ok(r),
        }
    }
}

impl Agent for Redirect {
    fn name(&self) -> &str {
        "redirect"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.family.keys().copied().collect()
    }
    fn before(&mut self, call: &Call, guest: &mut dyn Guest) -> Decision {
        let Some(&idx) = self.family.get(&call.nr) else {
            return Decision::Continue;
        };
        let mut hit: Option<(usize, Vec<u8>)> = None;
        for &i in idx {
            match self.one(call, i, guest) {
                Err(e) => return Decision::Fail(e),
                Ok(None) => {}
                Ok(Some(_)) if hit.is_some() => return Decision::Fail(libc::EXDEV),
                Ok(Some(n)) => hit = Some((i, n)),
            }
        }
        if !guest.still_pending() {
            // what was read may belong to a recycled tid: act on nothing
            return Decision::Fail(libc::EFAULT);
        }
        match hit {
            None => Decision::Continue,
            Some(path) => Decision::Perform(Perform {
                nr: call.nr,
                args: call.args,
                path: Some(path),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn redirect(specs: &[&str]) -> Redirect {
        let mut r = Redirect::default();
        for s in specs {
            r.add(s).unwrap();
        }
        r
    }

    fn rw(r: &Redirect, p: &str) -> Option<String> {
        r.rewrite(p.as_bytes())
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn every_family_call_exists_and_its_path_indices_are_arguments() {
        let r = Redirect::default();
        for &(name, idx) in FAMILY {
            assert!(Sysno::from_name(name).is_some(), "{name} is not a call");
            assert!(!idx.is_empty() && idx.len() <= 2, "{name}");
            for &i in idx {
                assert!(i < 6, "{name}: argument {i}");
            }
        }
        assert_eq!(r.family.len(), FAMILY.len(), "a call is listed twice");
        assert_eq!(r.wants().len(), FAMILY.len());
        // spot checks against libc's numbers
        assert_eq!(
            r.family.get(&Sysno(libc::SYS_openat as u32)),
            Some(&&[1usize][..])
        );
        assert_eq!(
            r.family.get(&Sysno(libc::SYS_renameat2 as u32)),
            Some(&&[1usize, 3][..])
        );
    }

    #[test]
    fn prefixes_match_whole_components() {
        let r = redirect(&["/data=/srv/other"]);
        assert_eq!(rw(&r, "/data/x").as_deref(), Some("/srv/other/x"));
        assert_eq!(rw(&r, "/data").as_deref(), Some("/srv/other"));
        assert_eq!(rw(&r, "/data/").as_deref(), Some("/srv/other/"));
        assert_eq!(rw(&r, "/data/a/b/c").as_deref(), Some("/srv/other/a/b/c"));
        assert_eq!(rw(&r, "//data/./x").as_deref(), Some("/srv/other/./x"));
        assert_eq!(rw(&r, "/./data/x").as_deref(), Some("/srv/other/x"));
        assert_eq!(rw(&r, "/./data//x").as_deref(), Some("/srv/other//x"));
        assert_eq!(rw(&r, "/database"), None);
        assert_eq!(rw(&r, "/dat"), None);
        assert_eq!(rw(&r, "/x/data"), None);
        assert_eq!(rw(&r, "data/x"), None);
        assert_eq!(rw(&r, ""), None);
        assert_eq!(rw(&r, "/"), None);
    }

    #[test]
    fn longest_old_wins_and_root_is_a_prefix_of_everything() {
        let r = redirect(&["/data=/a", "/data/sub=/b/", "/=/jail"]);
        assert_eq!(rw(&r, "/data/sub/x").as_deref(), Some("/b/x"));
        assert_eq!(rw(&r, "/data/subway").as_deref(), Some("/a/subway"));
        assert_eq!(rw(&r, "/data/x").as_deref(), Some("/a/x"));
        assert_eq!(rw(&r, "/etc/passwd").as_deref(), Some("/jail/etc/passwd"));
        assert_eq!(rw(&r, "/").as_deref(), Some("/jail/"));
        let r = redirect(&["/data=/"]);
        assert_eq!(rw(&r, "/data/x").as_deref(), Some("/x"));
        assert_eq!(rw(&r, "/data").as_deref(), Some("/"));
    }

    #[test]
    fn bad_specs_say_why() {
        let mut r = Redirect::default();
        for bad in [
            "/data",
            "data=/x",
            "/data=x",
            "=/x",
            "/data=",
            "/a/../b=/c",
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

    /// Random paths against a model: a rule matches exactly when the
    /// path's components start with OLD's, and the result's components
    /// are NEW's followed by the rest of the path's.
    #[test]
    fn rewrite_agrees_with_a_component_model() {
        let parts: [&[u8]; 8] = [
            b"data",
            b"database",
            b"sub",
            b"x",
            b".",
            b"..",
            b"",
            b"d\xffa",
        ];
        type Model<'a> = (&'a str, &'a [&'a [u8]], &'a [&'a [u8]]);
        let rules: [Model; 3] = [
            ("/data/sub=/b", &[b"data", b"sub"], &[b"b"]),
            ("/data=/srv/a", &[b"data"], &[b"srv", b"a"]),
            ("/x=/", &[b"x"], &[]),
        ];
        let mut r = Redirect::default();
        for (spec, _, _) in rules {
            r.add(spec).unwrap();
        }
        let comps = |p: &[u8]| -> Vec<Vec<u8>> { components(p).map(|(c, _)| c.to_vec()).collect() };
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut p = Vec::new();
            if next() % 8 != 0 {
                p.push(b'/');
            }
            for i in 0..(next() % 5) {
                if i > 0 {
                    p.extend(std::iter::repeat_n(b'/', 1 + (next() % 2) as usize));
                }
                p.extend_from_slice(parts[(next() % 8) as usize]);
            }
            if next() % 4 == 0 {
                p.push(b'/');
            }
            let got = r.rewrite(&p);
            let pc = comps(&p);
            let want = rules.iter().find(|(_, old, _)| {
                p.starts_with(b"/")
                    && pc.len() >= old.len()
                    && pc.iter().zip(old.iter()).all(|(a, b)| a.as_slice() == *b)
            });
            match (want, &got) {
                (None, None) => {}
                (Some((_, old, new)), Some(g)) => {
                    let mut expect: Vec<Vec<u8>> = new.iter().map(|c| c.to_vec()).collect();
                    expect.extend(pc[old.len()..].iter().cloned());
                    assert_eq!(
                        comps(g),
                        expect,
                        "{:?} -> {:?}",
                        String::from_utf8_lossy(&p),
                        String::from_utf8_lossy(g)
                    );
                    assert!(g.starts_with(b"/"));
                    // a trailing slash (must be a directory) is kept
                    assert!(
                        !p.ends_with(b"/") || g.ends_with(b"/"),
                        "{:?} -> {:?}",
                        String::from_utf8_lossy(&p),
                        String::from_utf8_lossy(g)
                    );
                }
                _ => panic!(
                    "{:?}: model {:?}, got {:?}",
                    String::from_utf8_lossy(&p),
                    want.map(|w| w.0),
                    got
                ),
            }
        }
    }

    fn guest_with(paths: &[(u64, &[u8])]) -> FakeGuest {
        let mut g = FakeGuest::default();
        for &(a, p) in paths {
            let mut v = p.to_vec();
            v.push(0);
            g.mem.insert(a, v);
        }
        g
    }

    fn call(name: &str, args: [u64; 6]) -> Call {
        Call {
            tid: 42,
            nr: Sysno::from_name(name).unwrap(),
            args,
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    #[test]
    fn a_matching_path_is_performed_with_the_new_bytes() {
        let mut r = redirect(&["/data=/srv/other"]);
        let mut g = guest_with(&[(0x1000, b"/data/x")]);
        let at_fdcwd = -100i64 as u64;
        let c = call("openat", [at_fdcwd, 0x1000, 0, 0, 0, 0]);
        assert_eq!(
            r.before(&c, &mut g),
            Decision::Perform(Perform {
                nr: c.nr,
                args: c.args,
                path: Some((1, b"/srv/other/x".to_vec())),
            })
        );
        // the dirfd does not matter for an absolute path
        let c = call("openat", [5, 0x1000, 0, 0, 0, 0]);
        assert!(matches!(r.before(&c, &mut g), Decision::Perform(_)));
        let c = call("execve", [0x1000, 0, 0, 0, 0, 0]);
        assert!(matches!(
            r.before(&c, &mut g),
            Decision::Perform(Perform {
                path: Some((0, _)),
                ..
            })
        ));
    }

    #[test]
    fn other_paths_relative_paths_and_null_continue() {
        let mut r = redirect(&["/data=/srv/other"]);
        let mut g = guest_with(&[(0x1000, b"/etc/passwd"), (0x2000, b"data/x")]);
        assert_eq!(
            r.before(&call("open", [0x1000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Continue
        );
        assert_eq!(
            r.before(&call("openat", [3, 0x2000, 0, 0, 0, 0]), &mut g),
            Decision::Continue
        );
        assert_eq!(
            r.before(&call("utimensat", [3, 0, 0, 0, 0, 0]), &mut g),
            Decision::Continue
        );
        // not a family call: not even read
        assert_eq!(
            r.before(&call("read", [0, 0xdead, 0, 0, 0, 0]), &mut g),
            Decision::Continue
        );
    }

    #[test]
    fn two_path_calls_rewrite_one_or_fail_with_exdev() {
        let mut r = redirect(&["/data=/srv"]);
        let mut g = guest_with(&[
            (0x1000, b"/data/a"),
            (0x2000, b"/tmp/b"),
            (0x3000, b"/data/c"),
        ]);
        assert_eq!(
            r.before(&call("rename", [0x1000, 0x2000, 0, 0, 0, 0]), &mut g),
            Decision::Perform(Perform {
                nr: Sysno::from_name("rename").unwrap(),
                args: [0x1000, 0x2000, 0, 0, 0, 0],
                path: Some((0, b"/srv/a".to_vec())),
            })
        );
        assert!(matches!(
            r.before(&call("renameat2", [0, 0x2000, 0, 0x3000, 0, 0]), &mut g),
            Decision::Perform(Perform {
                path: Some((3, _)),
                ..
            })
        ));
        assert_eq!(
            r.before(&call("linkat", [0, 0x1000, 0, 0x3000, 0, 0]), &mut g),
            Decision::Fail(libc::EXDEV)
        );
        // symlink's target is not looked up; its link path is
        assert_eq!(
            r.before(&call("symlink", [0x1000, 0x2000, 0, 0, 0, 0]), &mut g),
            Decision::Continue
        );
        assert!(matches!(
            r.before(&call("symlink", [0x2000, 0x1000, 0, 0, 0, 0]), &mut g),
            Decision::Perform(Perform {
                path: Some((1, _)),
                ..
            })
        ));
    }

    #[test]
    fn unreadable_long_or_vanished_paths_fail_the_call() {
        let mut r = redirect(&["/data=/srv/other"]);
        let mut g = guest_with(&[(0x1000, b"/data/x")]);
        // unmapped
        assert_eq!(
            r.before(&call("open", [0xdead0000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::EFAULT)
        );
        // no NUL within PATH_MAX
        g.mem.insert(0x10000, vec![b'a'; PATH_MAX + 10]);
        assert_eq!(
            r.before(&call("open", [0x10000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::ENAMETOOLONG)
        );
        // a path that fits, made too long by the rewrite
        let mut p = b"/data/".to_vec();
        p.resize(PATH_MAX - 1, b'y');
        p.push(0);
        g.mem.insert(0x20000, p);
        assert_eq!(
            r.before(&call("open", [0x20000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::ENAMETOOLONG)
        );
        // the call vanished while it was read
        g.gone = true;
        assert_eq!(
            r.before(&call("open", [0x1000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::EFAULT)
        );
    }

    /// A guest whose call vanishes after the read succeeded.
    struct VanishingGuest(FakeGuest);
    impl Guest for VanishingGuest {
        fn read(&mut self, a: u64, b: &mut [u8]) -> Result<usize, GuestError> {
            self.0.read(a, b)
        }
        fn still_pending(&mut self) -> bool {
            false
        }
    }

    #[test]
    fn a_path_read_from_a_call_no_longer_pending_is_not_acted_on() {
        let mut r = redirect(&["/data=/srv/other"]);
        let mut g = VanishingGuest(guest_with(&[(0x1000, b"/data/x"), (0x2000, b"/etc/x")]));
        assert_eq!(
            r.before(&call("open", [0x1000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::EFAULT)
        );
        assert_eq!(
            r.before(&call("open", [0x2000, 0, 0, 0, 0, 0]), &mut g),
            Decision::Fail(libc::EFAULT)
        );
    }
}

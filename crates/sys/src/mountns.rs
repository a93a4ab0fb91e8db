//! A private mount namespace with bind mounts, entered by a forked child
//! before it execs a guest: how `mantle run --redirect OLD=NEW` works.
//!
//! Why a mount and not path rewriting: the kernel then resolves every
//! path of every call (open, stat, exec, chdir, readlink, the `*at`
//! calls with directory fds, `..`, symbolic links, `/proc/self/root`,
//! io_uring's opens) against the same tree, once, with no window between
//! a check and the use; an executive that reads a path in guest memory
//! and lets the call continue cannot be race-free (platform.md).
//!
//! Mechanism, in the child (after fork, before the seccomp filter and the
//! exec; nothing here allocates, every buffer is made by
//! [`Binds::prepare`] before the fork):
//! 1. `unshare(CLONE_NEWNS)`; if that is refused (no CAP_SYS_ADMIN over
//!    the caller's user namespace), `unshare(CLONE_NEWUSER | CLONE_NEWNS)`
//!    and a user namespace that maps the caller's own uid and gid to
//!    themselves (`setgroups` denied first, as an unprivileged map
//!    requires; a map the kernel refuses, uid 0's without CAP_SETFCAP,
//!    is left out). After the exec a guest whose uid is not 0 in that
//!    namespace has no capability in it, so it cannot unmount what hides
//!    OLD.
//! 2. `/` recursively private, so that nothing propagates back to the
//!    machine's namespace.
//! 3. For each pair, NEW bound (recursively) over OLD.
//!
//! The caller's seccomp filter must refuse the mount calls (mount,
//! umount2, move_mount, open_tree, fsopen, fsmount, fspick, pivot_root,
//! mount_setattr, setns) to a guest that might hold CAP_SYS_ADMIN in the
//! new namespace (uid 0 without privilege; or root, which mantle does not
//! contain anyway).

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A step that failed in the child, for its status report.
pub const STEP_UNSHARE: u32 = 20;
pub const STEP_USER_MAP: u32 = 21;
pub const STEP_PRIVATE: u32 = 22;
pub const STEP_BIND: u32 = 23;

/// Bind mounts to make in a new mount namespace, prepared before a fork.
#[derive(Debug, Default)]
pub struct Binds {
    /// (source NEW, target OLD).
    pairs: Vec<(CString, CString)>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl Binds {
    /// `pairs` of (new, old): NEW will be seen at OLD. Fails on a NUL
    /// byte in a path.
    pub fn prepare<P: AsRef<Path>>(pairs: &[(P, P)]) -> io::Result<Binds> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
        };
        let pairs = pairs
            .iter()
            .map(|(n, o)| Ok((c(n.as_ref())?, c(o.as_ref())?)))
            .collect::<io::Result<Vec<_>>>()?;
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok(Binds {
            pairs,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// In the forked child: enters the namespace and makes the binds.
    /// Allocates nothing. `Err((step, errno))` names the step that failed.
    pub fn enter(&self) -> Result<(), (u32, i32)> {
        if self.pairs.is_empty() {
            return Ok(());
        }
        let errno = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        // SAFETY: unshare takes integer flags.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            let first = errno();
            if first != libc::EPERM {
                return Err((STEP_UNSHARE, first));
            }
            // SAFETY: as above.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
                return Err((STEP_UNSHARE, errno()));
            }
            // a non-dumpable child's /proc/self files are root's, and
            // its uid_map then cannot be written by its own user (the
            // fast path's executive is non-dumpable before it spawns);
            // the exec that follows sets dumpability anew
            // SAFETY: prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
                return Err((STEP_USER_MAP, errno()));
            }
            // the maps are best effort: mapping uid 0 needs CAP_SETFCAP
            // (Linux 5.12), which a capability-less root lacks; its guest
            // then runs unmapped (seen inside as the overflow uid 65534,
            // its files still the real uid's) and, not being root in the
            // namespace, keeps no capability after its exec. The
            // capabilities this process has now, over the new namespace,
            // are all the binds below need.
            write_file(c"/proc/self/setgroups", b"deny").map_err(|e| (STEP_USER_MAP, e))?;
            for (file, data) in [
                (c"/proc/self/uid_map", &self.uid_map[..]),
                (c"/proc/self/gid_map", &self.gid_map[..]),
            ] {
                match write_file(file, data) {
                    Ok(()) | Err(libc::EPERM) => {}
                    Err(e) => return Err((STEP_USER_MAP, e)),
                }
            }
        }
        // SAFETY: C strings, NULL file system type and data, integer flags.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err((STEP_PRIVATE, errno()));
        }
        for (new, old) in &self.pairs {
            // SAFETY: as above; both paths are C strings made before the fork.
            let rc = unsafe {
                libc::mount(
                    new.as_ptr(),
                    old.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                return Err((STEP_BIND, errno()));
            }
        }
        Ok(())
    }
}

/// One write of `data` to `file` (open, write, close: no allocation).
fn write_file(file: &CStr, data: &[u8]) -> Result<(), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: a C string and integer flags.
    let fd = unsafe { libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: data is valid for data.len() bytes; fd was just opened.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let e = errno();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if n != data.len() as isize {
        return Err(if n < 0 { e } else { libc::EIO });
    }
    Ok(())
}

/// The name of a step, for messages.
pub fn step_name(step: u32) -> Option<&'static str> {
    Some(match step {
        STEP_UNSHARE => {
            "unshare a mount namespace (needs CAP_SYS_ADMIN or unprivileged user namespaces)"
        }
        STEP_USER_MAP => "map the guest's uid and gid in its user namespace",
        STEP_PRIVATE => "make the guest's mounts private",
        STEP_BIND => "bind the redirect's NEW over OLD",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forked child binds a directory over another and sees the new
    /// contents at the old path; this process still sees the old ones.
    #[test]
    fn a_child_sees_new_at_old_and_the_parent_does_not() {
        let _g = crate::test_serial();
        let base = std::env::temp_dir().join(format!("mantle-mountns-{}", std::process::id()));
        let (old, new) = (base.join("old"), base.join("new"));
        std::fs::create_dir_all(&old).unwrap();
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(old.join("f"), "old").unwrap();
        std::fs::write(new.join("f"), "new").unwrap();
        let b = Binds::prepare(&[(new.clone(), old.clone())]).unwrap();
        let probe = CString::new(old.join("f").as_os_str().as_bytes()).unwrap();
        let run = || {
            if b.enter().is_err() {
                return 2; // no namespace here: checked below
            }
            let mut buf = [0u8; 3];
            // SAFETY: a C string made before the fork, a local buffer.
            let fd = unsafe { libc::open(probe.as_ptr(), libc::O_RDONLY) };
            // SAFETY: buf holds 3 bytes.
            if fd < 0 || unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 3) } != 3 {
                return 3;
            }
            if &buf == b"new" {
                0
            } else {
                1
            }
        };
        // SAFETY: the child makes system calls on memory made before the fork.
        let child = unsafe { crate::os::fork_child(run) }.unwrap();
        let code = match child.wait().unwrap() {
            crate::os::Exit::Code(c) => c,
            crate::os::Exit::Signal(s) => panic!("the child died of signal {s}"),
        };
        assert_eq!(std::fs::read_to_string(old.join("f")).unwrap(), "old");
        let _ = std::fs::remove_dir_all(&base);
        match code {
            0 => {}
            // root (CI) always can; a user may lack unprivileged user
            // namespaces on some machines
            2 if !crate::os::privileged() && !mantle_testsupport::ci() => {
                eprintln!("no mount namespace for this user here: bind not tried")
            }
            c => panic!("the child saw the wrong file (exit {c})"),
        }
    }
}

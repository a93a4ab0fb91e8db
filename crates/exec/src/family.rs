//! Call families: the system calls that do one thing under different
//! numbers (`open`, `openat`, `openat2`, `creat`, `open_by_handle_at`
//! all open a file). An agent that *enforces* (`--deny`) works on a whole
//! family, so that a guest cannot get around it with another call of the
//! same family. Pure.
//!
//! The table is x86-64's (numbers written next to the names, so that a
//! call newer than the generated table, such as `fchmodat2`, still
//! counts); a unit test checks every name the table knows against its
//! number. docs/exec.md "Call families" lists the same table for users.

use crate::sysno::Sysno;

/// One family: its name and its members (name, x86-64 number).
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub members: &'static [(&'static str, u32)],
    /// One line for `--help` and the docs.
    pub what: &'static str,
}

impl Family {
    pub fn numbers(&self) -> impl Iterator<Item = Sysno> + '_ {
        self.members.iter().map(|&(_, nr)| Sysno(nr))
    }
}

macro_rules! fam {
    ($name:literal, $what:literal, [$(($m:literal, $nr:literal)),* $(,)?]) => {
        Family { name: $name, what: $what, members: &[$(($m, $nr)),*] }
    };
}

/// Every family. A call is in at most one (tested).
pub const FAMILIES: &[Family] = &[
    fam!(
        "open",
        "open a file",
        [
            ("open", 2),
            ("openat", 257),
            ("openat2", 437),
            ("creat", 85),
            ("open_by_handle_at", 304),
            ("name_to_handle_at", 303)
        ]
    ),
    fam!(
        "stat",
        "a file's metadata",
        [
            ("stat", 4),
            ("lstat", 6),
            ("fstat", 5),
            ("newfstatat", 262),
            ("statx", 332)
        ]
    ),
    fam!(
        "statfs",
        "a file system's metadata",
        [("statfs", 137), ("fstatfs", 138)]
    ),
    fam!(
        "access",
        "check access to a path",
        [("access", 21), ("faccessat", 269), ("faccessat2", 439)]
    ),
    fam!(
        "readlink",
        "read a symbolic link",
        [("readlink", 89), ("readlinkat", 267)]
    ),
    fam!("exec", "run a program", [("execve", 59), ("execveat", 322)]),
    fam!(
        "chdir",
        "change the working directory",
        [("chdir", 80), ("fchdir", 81)]
    ),
    fam!(
        "unlink",
        "remove a name",
        [("unlink", 87), ("unlinkat", 263), ("rmdir", 84)]
    ),
    fam!(
        "rename",
        "rename",
        [("rename", 82), ("renameat", 264), ("renameat2", 316)]
    ),
    fam!(
        "mkdir",
        "make a directory",
        [("mkdir", 83), ("mkdirat", 258)]
    ),
    fam!(
        "mknod",
        "make a special file",
        [("mknod", 133), ("mknodat", 259)]
    ),
    fam!("link", "make a hard link", [("link", 86), ("linkat", 265)]),
    fam!(
        "symlink",
        "make a symbolic link",
        [("symlink", 88), ("symlinkat", 266)]
    ),
    fam!(
        "chmod",
        "change a mode",
        [
            ("chmod", 90),
            ("fchmod", 91),
            ("fchmodat", 268),
            ("fchmodat2", 452)
        ]
    ),
    fam!(
        "chown",
        "change an owner",
        [
            ("chown", 92),
            ("fchown", 93),
            ("lchown", 94),
            ("fchownat", 260)
        ]
    ),
    fam!(
        "truncate",
        "change a file's size",
        [("truncate", 76), ("ftruncate", 77)]
    ),
    fam!(
        "utime",
        "change a file's times",
        [
            ("utime", 132),
            ("utimes", 235),
            ("utimensat", 280),
            ("futimesat", 261)
        ]
    ),
    fam!(
        "xattr",
        "extended attributes",
        [
            ("setxattr", 188),
            ("lsetxattr", 189),
            ("fsetxattr", 190),
            ("getxattr", 191),
            ("lgetxattr", 192),
            ("fgetxattr", 193),
            ("listxattr", 194),
            ("llistxattr", 195),
            ("flistxattr", 196),
            ("removexattr", 197),
            ("lremovexattr", 198),
            ("fremovexattr", 199),
            ("setxattrat", 463),
            ("getxattrat", 464),
            ("listxattrat", 465),
            ("removexattrat", 466)
        ]
    ),
    fam!(
        "getdents",
        "list a directory",
        [("getdents", 78), ("getdents64", 217)]
    ),
    fam!(
        "read",
        "read from a descriptor",
        [
            ("read", 0),
            ("pread64", 17),
            ("readv", 19),
            ("preadv", 295),
            ("preadv2", 327)
        ]
    ),
    fam!(
        "write",
        "write to a descriptor",
        [
            ("write", 1),
            ("pwrite64", 18),
            ("writev", 20),
            ("pwritev", 296),
            ("pwritev2", 328)
        ]
    ),
    fam!(
        "sendfile",
        "copy between descriptors in the kernel",
        [
            ("sendfile", 40),
            ("splice", 275),
            ("tee", 276),
            ("copy_file_range", 326),
            ("vmsplice", 278)
        ]
    ),
    fam!(
        "socket",
        "make a socket",
        [("socket", 41), ("socketpair", 53)]
    ),
    fam!(
        "send",
        "send on a socket",
        [("sendto", 44), ("sendmsg", 46), ("sendmmsg", 307)]
    ),
    fam!(
        "recv",
        "receive on a socket",
        [("recvfrom", 45), ("recvmsg", 47), ("recvmmsg", 299)]
    ),
    fam!(
        "accept",
        "accept a connection",
        [("accept", 43), ("accept4", 288)]
    ),
    fam!(
        "dup",
        "duplicate a descriptor",
        [("dup", 32), ("dup2", 33), ("dup3", 292)]
    ),
    fam!("pipe", "make a pipe", [("pipe", 22), ("pipe2", 293)]),
    fam!(
        "kill",
        "send a signal",
        [
            ("kill", 62),
            ("tkill", 200),
            ("tgkill", 234),
            ("rt_sigqueueinfo", 129),
            ("rt_tgsigqueueinfo", 297),
            ("pidfd_send_signal", 424)
        ]
    ),
    fam!(
        "fork",
        "make a process or thread",
        [("fork", 57), ("vfork", 58), ("clone", 56), ("clone3", 435)]
    ),
    fam!("wait", "wait for a child", [("wait4", 61), ("waitid", 247)]),
    fam!(
        "sleep",
        "sleep",
        [("nanosleep", 35), ("clock_nanosleep", 230)]
    ),
    fam!(
        "ptrace",
        "reach another process's memory",
        [
            ("ptrace", 101),
            ("process_vm_readv", 310),
            ("process_vm_writev", 311),
            ("pidfd_getfd", 438)
        ]
    ),
    fam!(
        "setuid",
        "change user ids",
        [
            ("setuid", 105),
            ("setreuid", 113),
            ("setresuid", 117),
            ("setfsuid", 122)
        ]
    ),
    fam!(
        "setgid",
        "change group ids",
        [
            ("setgid", 106),
            ("setregid", 114),
            ("setresgid", 119),
            ("setfsgid", 123),
            ("setgroups", 116)
        ]
    ),
    fam!(
        "io_uring",
        "io_uring: calls no filter sees",
        [
            ("io_uring_setup", 425),
            ("io_uring_enter", 426),
            ("io_uring_register", 427)
        ]
    ),
    fam!(
        "mount",
        "change the mount tree",
        [
            ("mount", 165),
            ("umount2", 166),
            ("pivot_root", 155),
            ("move_mount", 429),
            ("open_tree", 428),
            ("fsopen", 430),
            ("fsconfig", 431),
            ("fsmount", 432),
            ("fspick", 433),
            ("mount_setattr", 442),
            ("open_tree_attr", 467)
        ]
    ),
    fam!(
        "namespace",
        "enter or make namespaces",
        [("setns", 308), ("unshare", 272), ("chroot", 161)]
    ),
];

/// The family named `name`.
pub fn by_name(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The family that call `nr` belongs to.
pub fn of(nr: Sysno) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .find(|f| f.members.iter().any(|&(_, n)| n == nr.0))
}

/// What a name in an enforcing option means: a family's name, or a
/// member's (the whole family), or any other call alone; a number is that
/// call alone (`--deny 257`). `None`: no such call or family.
pub fn resolve(name: &str) -> Option<Resolved> {
    if let Some(f) = by_name(name) {
        return Some(Resolved::Family(f));
    }
    if let Ok(n) = name.parse::<u32>() {
        return (n < crate::agent::MAX_NR).then_some(Resolved::Number(Sysno(n)));
    }
    let nr = Sysno::from_name(name).or_else(|| {
        FAMILIES
            .iter()
            .flat_map(|f| f.members.iter())
            .find(|&&(m, _)| m == name)
            .map(|&(_, n)| Sysno(n))
    })?;
    Some(match of(nr) {
        Some(f) => Resolved::Family(f),
        None => Resolved::Call(nr),
    })
}

/// What [`resolve`] found.
#[derive(Clone, Copy, Debug)]
pub enum Resolved {
    Family(&'static Family),
    /// A call in no family, by name.
    Call(Sysno),
    /// A raw number: exactly that call.
    Number(Sysno),
}

impl Resolved {
    pub fn numbers(&self) -> Vec<Sysno> {
        match self {
            Resolved::Family(f) => f.numbers().collect(),
            Resolved::Call(n) | Resolved::Number(n) => vec![*n],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_the_table_knows_has_its_number() {
        for f in FAMILIES {
            for &(m, nr) in f.members {
                if let Some(s) = Sysno::from_name(m) {
                    assert_eq!(s.0, nr, "{m} in family {}", f.name);
                }
                assert!(nr < crate::agent::MAX_NR, "{m}");
            }
        }
    }

    #[test]
    fn a_call_is_in_one_family_at_most_and_names_are_unique() {
        let mut seen = std::collections::BTreeMap::new();
        for f in FAMILIES {
            for &(m, nr) in f.members {
                assert!(seen.insert(nr, f.name).is_none(), "{m} twice");
            }
        }
        let mut names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
    }

    #[test]
    fn a_member_means_its_family_and_a_number_means_itself() {
        for f in FAMILIES {
            for &(m, _) in f.members {
                match resolve(m) {
                    Some(Resolved::Family(g)) => assert_eq!(g.name, f.name, "{m}"),
                    r => panic!("{m}: {r:?}"),
                }
            }
        }
        let open = resolve("openat").unwrap().numbers();
        assert_eq!(open.len(), 6);
        assert!(matches!(resolve("257"), Some(Resolved::Number(Sysno(257)))));
        assert!(matches!(resolve("getppid"), Some(Resolved::Call(_))));
        assert!(resolve("4096").is_none());
        assert!(resolve("no_such_call").is_none());
        // the family named like its first call is the family
        assert_eq!(resolve("open").unwrap().numbers(), open);
    }
}

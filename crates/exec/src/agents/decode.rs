//! Arguments and results of common calls as text, for the trace: which
//! argument is a file descriptor, a path, open flags, a mode... Written
//! here from the calls' manual pages (x86-64 argument order); calls not
//! listed show their six arguments in hex. Pure: guest memory is read
//! only through [`Guest`], and what it returns is shown, never trusted.

use crate::agent::Guest;
use crate::sysno::Sysno;

/// Longest path read (PATH_MAX with its NUL).
const PATH_MAX: usize = 4096;
/// Longest other string shown (xattr names, argv entries).
const STR_MAX: usize = 256;
/// argv entries shown.
const ARGV_MAX: usize = 32;

/// How one argument is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// `int`, signed decimal (the low 32 bits).
    Int,
    /// `long`/`off_t`, signed decimal.
    Long,
    /// `size_t`, unsigned decimal.
    Size,
    /// Pointer or opaque bits, hex.
    Hex,
    /// File descriptor.
    Fd,
    /// Directory fd of an `*at` call (`AT_FDCWD`).
    DirFd,
    /// Path (NULL allowed).
    Path,
    /// Other NUL-terminated string.
    Str,
    /// `O_*` flags of open.
    OpenFlags,
    /// Permission bits, octal.
    Mode,
    /// `AT_*` flags (lookup).
    AtFlags,
    /// unlinkat's flags (`AT_REMOVEDIR`).
    UnlinkFlags,
    /// access's mode (`R_OK|W_OK|X_OK`, `F_OK`).
    AccessMode,
    /// faccessat2's flags (`AT_EACCESS`, lookup flags).
    AccessAtFlags,
    /// Signal number.
    Signal,
    /// `char *const argv[]`.
    Argv,
}

use Arg::*;

/// The arguments of a call, if known.
pub fn signature(nr: Sysno) -> Option<&'static [Arg]> {
    Some(match &*nr.name() {
        "read" | "write" => &[Fd, Hex, Size],
        "pread64" | "pwrite64" => &[Fd, Hex, Size, Long],
        "readv" | "writev" => &[Fd, Hex, Int],
        "open" => &[Path, OpenFlags, Mode],
        "openat" => &[DirFd, Path, OpenFlags, Mode],
        "openat2" => &[DirFd, Path, Hex, Size],
        "creat" => &[Path, Mode],
        "close" => &[Fd],
        "stat" | "lstat" | "statfs" => &[Path, Hex],
        "fstat" | "fstatfs" => &[Fd, Hex],
        "newfstatat" => &[DirFd, Path, Hex, AtFlags],
        "statx" => &[DirFd, Path, AtFlags, Hex, Hex],
        "lseek" => &[Fd, Long, Int],
        "mmap" => &[Hex, Size, Hex, Hex, Fd, Hex],
        "mprotect" => &[Hex, Size, Hex],
        "munmap" => &[Hex, Size],
        "brk" => &[Hex],
        "ioctl" => &[Fd, Hex, Hex],
        "fcntl" => &[Fd, Int, Hex],
        "access" => &[Path, AccessMode],
        "faccessat" => &[DirFd, Path, AccessMode],
        "faccessat2" => &[DirFd, Path, AccessMode, AccessAtFlags],
        "pipe" => &[Hex],
        "pipe2" => &[Hex, OpenFlags],
        "dup" => &[Fd],
        "dup2" => &[Fd, Fd],
        "dup3" => &[Fd, Fd, OpenFlags],
        "getpid" | "getppid" | "gettid" | "getuid" | "geteuid" | "getgid" | "getegid" | "fork"
        | "vfork" | "sched_yield" => &[],
        "clone" => &[Hex, Hex, Hex, Hex, Hex],
        "clone3" => &[Hex, Size],
        "execve" => &[Path, Argv, Hex],
        "execveat" => &[DirFd, Path, Argv, Hex, AtFlags],
        "exit" | "exit_group" => &[Int],
        "wait4" => &[Int, Hex, Hex, Hex],
        "kill" => &[Int, Signal],
        "tkill" => &[Int, Signal],
        "tgkill" => &[Int, Int, Signal],
        "truncate" => &[Path, Long],
        "ftruncate" => &[Fd, Long],
        "getdents64" => &[Fd, Hex, Size],
        "chdir" | "chroot" | "rmdir" | "unlink" => &[Path],
        "fchdir" => &[Fd],
        "rename" | "link" | "symlink" => &[Path, Path],
        "renameat" => &[DirFd, Path, DirFd, Path],
        "renameat2" => &[DirFd, Path, DirFd, Path, Hex],
        "linkat" => &[DirFd, Path, DirFd, Path, AtFlags],
        "symlinkat" => &[Path, DirFd, Path],
        "mkdir" | "chmod" => &[Path, Mode],
        "mkdirat" | "fchmodat" => &[DirFd, Path, Mode],
        "mknod" => &[Path, Mode, Hex],
        "mknodat" => &[DirFd, Path, Mode, Hex],
        "unlinkat" => &[DirFd, Path, UnlinkFlags],
        "readlink" => &[Path, Hex, Size],
        "readlinkat" => &[DirFd, Path, Hex, Size],
        "fchmod" => &[Fd, Mode],
        "chown" | "lchown" => &[Path, Int, Int],
        "fchown" => &[Fd, Int, Int],
        "fchownat" => &[DirFd, Path, Int, Int, AtFlags],
        "utime" | "utimes" => &[Path, Hex],
        "futimesat" => &[DirFd, Path, Hex],
        "utimensat" => &[DirFd, Path, Hex, AtFlags],
        "getxattr" | "lgetxattr" => &[Path, Str, Hex, Size],
        "setxattr" | "lsetxattr" => &[Path, Str, Hex, Size, Hex],
        "listxattr" | "llistxattr" => &[Path, Hex, Size],
        "removexattr" | "lremovexattr" => &[Path, Str],
        "inotify_add_watch" => &[Fd, Path, Hex],
        "socket" => &[Int, Int, Int],
        "connect" | "bind" => &[Fd, Hex, Int],
        "accept" => &[Fd, Hex, Hex],
        "accept4" => &[Fd, Hex, Hex, Hex],
        "listen" => &[Fd, Int],
        "nanosleep" => &[Hex, Hex],
        _ => return None,
    })
}

/// Whether the call's success value is an address (shown in hex).
pub fn returns_address(nr: Sysno) -> bool {
    matches!(&*nr.name(), "mmap" | "mremap" | "brk" | "shmat")
}

/// Every call's arguments as text: the known signature, or six in hex.
pub fn args(nr: Sysno, a: &[u64; 6], guest: &mut dyn Guest) -> Vec<String> {
    match signature(nr) {
        Some(sig) => {
            let mut sig = sig;
            // like open(2) itself, ignore the mode unless a file is made
            if let [.., OpenFlags, Mode] = sig {
                let fl = a[sig.len() - 2] as u32;
                let makes =
                    libc::O_CREAT as u32 | (libc::O_TMPFILE as u32 & !(libc::O_DIRECTORY as u32));
                if fl & makes == 0 {
                    sig = &sig[..sig.len() - 1];
                }
            }
            sig.iter().zip(a).map(|(&k, &v)| one(k, v, guest)).collect()
        }
        None => a.iter().map(|v| format!("{v:#x}")).collect(),
    }
}

/// One argument as text.
pub fn one(kind: Arg, v: u64, guest: &mut dyn Guest) -> String {
    match kind {
        Int | Fd => (v as u32 as i32).to_string(),
        Long => (v as i64).to_string(),
        Size => v.to_string(),
        Hex => format!("{v:#x}"),
        DirFd if v as u32 as i32 == libc::AT_FDCWD => "AT_FDCWD".into(),
        DirFd => (v as u32 as i32).to_string(),
        Path => string(v, PATH_MAX, guest),
        Str => string(v, STR_MAX, guest),
        OpenFlags => open_flags(v as u32),
        Mode if v as u32 == 0 => "0".into(),
        Mode => format!("0{:o}", v as u32),
        AtFlags => flags(v as u32, AT_LOOKUP),
        UnlinkFlags => flags(v as u32, &[(libc::AT_REMOVEDIR as u32, "AT_REMOVEDIR")]),
        AccessAtFlags => flags(v as u32, ACCESS_AT),
        AccessMode => access_mode(v as u32),
        Signal => signal(v as u32 as i32),
        Argv => argv(v, guest),
    }
}

/// A string argument: quoted and escaped, `NULL`, or its address when it
/// cannot be read (with the reason as a comment, like a C cast).
fn string(addr: u64, max: usize, guest: &mut dyn Guest) -> String {
    if addr == 0 {
        return "NULL".into();
    }
    match guest.read_cstr(addr, max) {
        Ok(s) => quote(&s),
        Err(e) => format!("{addr:#x} /* {e} */"),
    }
}

/// `"..."` with C escapes: printable ASCII as is, the rest as `\xNN`.
pub fn quote(s: &[u8]) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for &c in s {
        match c {
            b'"' => o.push_str("\\\""),
            b'\\' => o.push_str("\\\\"),
            b'\n' => o.push_str("\\n"),
            b'\t' => o.push_str("\\t"),
            b'\r' => o.push_str("\\r"),
            0x20..=0x7e => o.push(c as char),
            _ => o.push_str(&format!("\\x{c:02x}")),
        }
    }
    o.push('"');
    o
}

fn argv(addr: u64, guest: &mut dyn Guest) -> String {
    if addr == 0 {
        return "NULL".into();
    }
    let mut items = Vec::new();
    for i in 0..=ARGV_MAX {
        let mut p = [0u8; 8];
        match guest.read(addr + 8 * i as u64, &mut p) {
            Ok(8) => {}
            _ => return format!("{addr:#x} /* unreadable argv */"),
        }
        let p = u64::from_ne_bytes(p);
        if p == 0 {
            break;
        }
        if i == ARGV_MAX {
            items.push("...".to_string());
            break;
        }
        items.push(string(p, STR_MAX, guest));
    }
    format!("[{}]", items.join(", "))
}

/// Bits by name, the rest in hex, `|`-joined; `0` when none.
fn flags(v: u32, names: &[(u32, &str)]) -> String {
    let mut parts = Vec::new();
    let mut rest = v;
    for &(bit, name) in names {
        if bit != 0 && rest & bit == bit {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join("|")
    }
}

/// faccessat2's flags: 0x200 is AT_EACCESS here, AT_REMOVEDIR in unlinkat.
const ACCESS_AT: &[(u32, &str)] = &[
    (libc::AT_EACCESS as u32, "AT_EACCESS"),
    (libc::AT_SYMLINK_NOFOLLOW as u32, "AT_SYMLINK_NOFOLLOW"),
    (libc::AT_EMPTY_PATH as u32, "AT_EMPTY_PATH"),
];
const AT_LOOKUP: &[(u32, &str)] = &[
    (libc::AT_SYMLINK_NOFOLLOW as u32, "AT_SYMLINK_NOFOLLOW"),
    (libc::AT_SYMLINK_FOLLOW as u32, "AT_SYMLINK_FOLLOW"),
    (libc::AT_NO_AUTOMOUNT as u32, "AT_NO_AUTOMOUNT"),
    (libc::AT_EMPTY_PATH as u32, "AT_EMPTY_PATH"),
    (libc::AT_STATX_FORCE_SYNC as u32, "AT_STATX_FORCE_SYNC"),
    (libc::AT_STATX_DONT_SYNC as u32, "AT_STATX_DONT_SYNC"),
];

/// Open flags: the access mode, then the flags; composite flags
/// (O_TMPFILE contains O_DIRECTORY, O_SYNC contains O_DSYNC) first.
const OPEN: &[(u32, &str)] = &[
    (libc::O_TMPFILE as u32, "O_TMPFILE"),
    (libc::O_SYNC as u32, "O_SYNC"),
    (libc::O_CREAT as u32, "O_CREAT"),
    (libc::O_EXCL as u32, "O_EXCL"),
    (libc::O_NOCTTY as u32, "O_NOCTTY"),
    (libc::O_TRUNC as u32, "O_TRUNC"),
    (libc::O_APPEND as u32, "O_APPEND"),
    (libc::O_NONBLOCK as u32, "O_NONBLOCK"),
    (libc::O_DSYNC as u32, "O_DSYNC"),
    (libc::O_ASYNC as u32, "O_ASYNC"),
    (libc::O_DIRECT as u32, "O_DIRECT"),
    (libc::O_LARGEFILE as u32, "O_LARGEFILE"),
    (libc::O_DIRECTORY as u32, "O_DIRECTORY"),
    (libc::O_NOFOLLOW as u32, "O_NOFOLLOW"),
    (libc::O_NOATIME as u32, "O_NOATIME"),
    (libc::O_CLOEXEC as u32, "O_CLOEXEC"),
    (libc::O_PATH as u32, "O_PATH"),
];

fn open_flags(v: u32) -> String {
    let acc = match v & libc::O_ACCMODE as u32 {
        0 => "O_RDONLY".to_string(),
        1 => "O_WRONLY".to_string(),
        2 => "O_RDWR".to_string(),
        _ => "O_ACCMODE".to_string(),
    };
    let rest = v & !(libc::O_ACCMODE as u32);
    if rest == 0 {
        acc
    } else {
        format!("{acc}|{}", flags(rest, OPEN))
    }
}

fn access_mode(v: u32) -> String {
    if v == 0 {
        return "F_OK".into();
    }
    flags(
        v,
        &[
            (libc::R_OK as u32, "R_OK"),
            (libc::W_OK as u32, "W_OK"),
            (libc::X_OK as u32, "X_OK"),
        ],
    )
}

const SIGNALS: &[(i32, &str)] = &[
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSYS, "SIGSYS"),
];

fn signal(s: i32) -> String {
    signal_name(s).unwrap_or_else(|| s.to_string())
}

/// The name of signal `s` (`SIGSEGV`, `SIGRTMIN+3`), if it has one: the
/// one signal table (the trace's decoder and the executive's reports).
pub fn signal_name(s: i32) -> Option<String> {
    match SIGNALS.iter().find(|&&(n, _)| n == s) {
        Some(&(_, name)) => Some(name.into()),
        None if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&s) => {
            Some(format!("SIGRTMIN+{}", s - libc::SIGRTMIN()))
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    #[test]
    fn every_signature_names_a_real_call_with_at_most_six_arguments() {
        let mut n = 0;
        for s in Sysno::all() {
            if let Some(sig) = signature(s) {
                assert!(sig.len() <= 6, "{s}");
                n += 1;
            }
        }
        assert!(n > 90, "{n} signatures");
        // a signature listed for a name the table lacks would never match:
        // the names here are checked by matching them against the table
        for name in ["openat", "execveat", "faccessat2", "statx", "getppid"] {
            assert!(signature(nr(name)).is_some(), "{name}");
        }
    }

    #[test]
    fn openat_reads_like_strace() {
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, b"/etc/passwd\0".to_vec());
        let at = libc::AT_FDCWD as i64 as u64;
        let a = args(nr("openat"), &[at, 0x1000, 0, 0, 0, 0], &mut g);
        // the mode only matters (and is only shown) when a file is made
        assert_eq!(a, ["AT_FDCWD", "\"/etc/passwd\"", "O_RDONLY"]);
        let fl = (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC) as u64;
        let a = args(nr("openat"), &[3, 0xbad, fl, 0o644, 0, 0], &mut g);
        assert_eq!(a[0], "3");
        assert!(a[1].starts_with("0xbad /* "), "{}", a[1]);
        assert_eq!(a[2], "O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC");
        assert_eq!(a[3], "0644");
        let a = args(nr("open"), &[0xbad, 0, 0o600, 0, 0, 0], &mut g);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn composite_and_unknown_flags() {
        assert_eq!(open_flags(libc::O_RDWR as u32), "O_RDWR");
        assert_eq!(
            open_flags((libc::O_TMPFILE | libc::O_RDWR) as u32),
            "O_RDWR|O_TMPFILE"
        );
        assert_eq!(open_flags(libc::O_DIRECTORY as u32), "O_RDONLY|O_DIRECTORY");
        assert_eq!(open_flags(libc::O_SYNC as u32), "O_RDONLY|O_SYNC");
        assert_eq!(open_flags(libc::O_DSYNC as u32), "O_RDONLY|O_DSYNC");
        assert_eq!(open_flags(0x8000_0000), "O_RDONLY|0x80000000");
        assert_eq!(access_mode(0), "F_OK");
        assert_eq!(
            access_mode(libc::R_OK as u32 | libc::X_OK as u32),
            "R_OK|X_OK"
        );
        assert_eq!(flags(0, AT_LOOKUP), "0");
        assert_eq!(
            flags(libc::AT_EMPTY_PATH as u32 | 0x10_0000, AT_LOOKUP),
            "AT_EMPTY_PATH|0x100000"
        );
        assert_eq!(
            flags(
                libc::AT_EACCESS as u32 | libc::AT_EMPTY_PATH as u32,
                ACCESS_AT
            ),
            "AT_EACCESS|AT_EMPTY_PATH"
        );
        assert_eq!(
            flags(
                libc::AT_REMOVEDIR as u32,
                &[(libc::AT_REMOVEDIR as u32, "AT_REMOVEDIR")]
            ),
            "AT_REMOVEDIR"
        );
        assert_eq!(signal(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
        assert_eq!(signal(0), "0");
    }

    #[test]
    fn strings_are_escaped_and_argv_is_listed() {
        assert_eq!(quote(b"a\"b\\c\n\x01\xff"), "\"a\\\"b\\\\c\\n\\x01\\xff\"");
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, b"ls\0".to_vec());
        g.mem.insert(0x2000, b"-l\0".to_vec());
        let mut v = Vec::new();
        for p in [0x1000u64, 0x2000, 0] {
            v.extend_from_slice(&p.to_ne_bytes());
        }
        g.mem.insert(0x3000, v);
        g.mem.insert(0x4000, b"/bin/ls\0".to_vec());
        assert_eq!(
            args(nr("execve"), &[0x4000, 0x3000, 0, 0, 0, 0], &mut g),
            ["\"/bin/ls\"", "[\"ls\", \"-l\"]", "0x0"]
        );
        assert!(one(Argv, 0x9999, &mut g).contains("unreadable"));
        assert_eq!(one(Argv, 0, &mut g), "NULL");
        assert_eq!(one(Path, 0, &mut g), "NULL");
        // an argv without its NULL is cut, not read forever
        let mut long = Vec::new();
        for _ in 0..100 {
            long.extend_from_slice(&0x1000u64.to_ne_bytes());
        }
        g.mem.insert(0x10000, long);
        let s = one(Argv, 0x10000, &mut g);
        assert!(s.ends_with(", ...]"), "{s}");
    }

    #[test]
    fn unknown_calls_show_six_hex_arguments() {
        let mut g = FakeGuest::default();
        assert_eq!(
            args(nr("io_uring_setup"), &[1, 2, 3, 4, 5, 0xff], &mut g),
            ["0x1", "0x2", "0x3", "0x4", "0x5", "0xff"]
        );
        assert_eq!(args(nr("getppid"), &[9; 6], &mut g), Vec::<String>::new());
        assert_eq!(one(Fd, u64::MAX, &mut g), "-1");
        assert_eq!(one(DirFd, 7, &mut g), "7");
    }
}

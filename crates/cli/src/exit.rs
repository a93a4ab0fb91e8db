//! Exit codes and failures: the one table of exit codes (README "Exit
//! codes"), the one function that gives a library error its exit code
//! ([`exit_code`]), and [`Failure`], which every error of every subsystem
//! becomes on its way out. main prints the message and exits with the code.

// The exit codes: ONE rule for every command (README "Exit codes").
/// The operation was tried and failed (the kernel refused it, a tag
/// exists already, the table is full, I/O failed).
pub const EXIT_FAILURE: u8 = 1;
/// The command line is malformed: unknown command or option, a value out
/// of range (TTL, lifeline size, duration), a malformed tag name, or a
/// malformed file it names. clap exits with the same code.
pub const EXIT_USAGE: u8 = 2;
/// The tags kernel side is not loaded, or the machine lacks a kernel
/// feature or tool the command needs.
pub const EXIT_MISSING: u8 = 3;
/// Permission denied: the command needs privilege, or the object is
/// another user's.
pub const EXIT_PERMISSION: u8 = 4;
/// Something named does not exist: a tag, thread, process, user, file,
/// the program `tag run` should start, or a tag's lifeline.
pub const EXIT_NOT_FOUND: u8 = 5;

// `mantle run` is a wrapper like env, timeout and chroot: its exit status
// is the command's, so its own failures take the codes those tools use,
// above any status a command is likely to choose (README "Exit codes").
/// `mantle run`: mantle itself failed (a malformed command line, an
/// executive that could not start or died, a redirect that cannot be
/// made).
pub const EXIT_RUN_ERROR: u8 = 125;
/// `mantle run`: the command was found but cannot be run.
pub const EXIT_RUN_CANNOT: u8 = 126;
/// `mantle run`: the command was not found.
pub const EXIT_RUN_NOT_FOUND: u8 = 127;

/// A message as the user reads it: Rust's io::Error appends
/// " (os error N)" to the system's own words, which says nothing more.
pub fn plain(message: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..i]);
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[..i + MARK.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// An error of one of the libraries the commands call.
pub enum LibError<'a> {
    Tags(&'a mantle_tags::Error),
    Prof(&'a mantle_prof::Error),
    /// A file the user named could not be read or written.
    Io(&'a std::io::Error),
}

/// The exit code of a library error: the whole mapping, for every
/// subsystem.
pub fn exit_code(e: LibError<'_>) -> u8 {
    use mantle_prof::Error as P;
    use mantle_tags::Error as T;
    use std::io::ErrorKind as K;
    match e {
        LibError::Tags(e) => match e {
            T::NotLoaded | T::Missing(_) => EXIT_MISSING,
            T::UnknownTag(_) | T::NoSuchThread(_) => EXIT_NOT_FOUND,
            T::Invalid(_) => EXIT_USAGE,
            // ours, or the kernel's EPERM/EACCES kept as the source
            e if e.is_permission() => EXIT_PERMISSION,
            _ => EXIT_FAILURE,
        },
        LibError::Prof(e) => match e {
            P::NoPmu(_) | P::FallbackNoPmu { .. } => EXIT_MISSING,
            P::Permission(_) => EXIT_PERMISSION,
            e if matches!(e.errno(), Some(libc::EPERM | libc::EACCES)) => EXIT_PERMISSION,
            P::NoSession(_) | P::NoSuchProcess(_) | P::NoMatch { .. } => EXIT_NOT_FOUND,
            P::UnknownEvent(..) | P::Invalid(_) | P::RateTooHigh { .. } => EXIT_USAGE,
            P::SessionExists(_) | P::NotASession(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        },
        LibError::Io(e) => match e.kind() {
            K::NotFound => EXIT_NOT_FOUND,
            K::PermissionDenied => EXIT_PERMISSION,
            _ => EXIT_FAILURE,
        },
    }
}

/// A failed command: what to print and the exit code.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    /// A failure the command itself decides on (not a library's error).
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }

    /// A file the user named could not be read or written.
    pub fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> Failure {
        Failure::new(
            exit_code(LibError::Io(e)),
            format!("{what} {}: {e}", path.display()),
        )
    }
}

impl From<mantle_tags::Error> for Failure {
    fn from(e: mantle_tags::Error) -> Self {
        Failure::new(exit_code(LibError::Tags(&e)), e.to_string())
    }
}

impl From<mantle_prof::Error> for Failure {
    fn from(e: mantle_prof::Error) -> Self {
        Failure::new(exit_code(LibError::Prof(&e)), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tags subsystem's errors reach the user as the documented codes.
    #[test]
    fn tags_errors() {
        use mantle_tags::Error as T;
        let code = |e: T| Failure::from(e).code;
        assert_eq!(code(T::NotLoaded), EXIT_MISSING);
        assert_eq!(code(T::Missing("x".into())), EXIT_MISSING);
        assert_eq!(code(T::Permission("x".into())), EXIT_PERMISSION);
        assert_eq!(code(T::UnknownTag("x".into())), EXIT_NOT_FOUND);
        assert_eq!(code(T::NoSuchThread(1)), EXIT_NOT_FOUND);
        assert_eq!(code(T::Invalid("x".into())), EXIT_USAGE);
        assert_eq!(code(T::Exists("x".into())), EXIT_FAILURE);
        assert_eq!(code(T::TableFull), EXIT_FAILURE);
        // A system call's EPERM or EACCES, kept as the source, is a
        // permission failure whichever call it was; other errnos are not.
        for (errno, want) in [
            (libc::EPERM, EXIT_PERMISSION),
            (libc::EACCES, EXIT_PERMISSION),
            (libc::EINVAL, EXIT_FAILURE),
            (libc::ENOMEM, EXIT_FAILURE),
        ] {
            let e = T::sys(
                "open pinned map x",
                std::io::Error::from_raw_os_error(errno),
            );
            assert_eq!(code(e), want, "errno {errno}");
        }
        // The message is the error's own.
        assert_eq!(
            Failure::from(T::UnknownTag("req".into())).message,
            "unknown tag \"req\""
        );
    }

    #[test]
    fn plain_drops_rusts_errno_suffix_only() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            plain(&format!("cannot read /x: {e}")),
            "cannot read /x: No such file or directory"
        );
        assert_eq!(plain("a (os error x) b (os error 12)"), "a (os error x) b");
        assert_eq!(plain("nothing to drop"), "nothing to drop");
    }

    /// A file the user named: missing is 5, not allowed is 4, else 1.
    #[test]
    fn file_errors() {
        use std::io::{Error, ErrorKind};
        let p = std::path::Path::new("/x");
        let f = |k: ErrorKind| Failure::io("cannot read", p, &Error::from(k));
        assert_eq!(f(ErrorKind::NotFound).code, EXIT_NOT_FOUND);
        assert_eq!(f(ErrorKind::PermissionDenied).code, EXIT_PERMISSION);
        assert_eq!(f(ErrorKind::InvalidData).code, EXIT_FAILURE);
        assert!(f(ErrorKind::NotFound)
            .message
            .starts_with("cannot read /x: "));
    }
}

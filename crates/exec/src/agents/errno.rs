//! Errno names for `--deny NAME=ERRNO` and for the trace's results: the
//! Linux names, written here from the libc crate's constants (so a typo in
//! a number cannot creep in), one canonical name per number plus the three
//! aliases Linux defines. Pure.

/// Canonical Linux errno names, by number (1..=133, 41 and 58 unused).
const NAMES: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("ESRCH", libc::ESRCH),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("ENXIO", libc::ENXIO),
    ("E2BIG", libc::E2BIG),
    ("ENOEXEC", libc::ENOEXEC),
    ("EBADF", libc::EBADF),
    ("ECHILD", libc::ECHILD),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("ENOTBLK", libc::ENOTBLK),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("EXDEV", libc::EXDEV),
    ("ENODEV", libc::ENODEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("ENFILE", libc::ENFILE),
    ("EMFILE", libc::EMFILE),
    ("ENOTTY", libc::ENOTTY),
    ("ETXTBSY", libc::ETXTBSY),
    ("EFBIG", libc::EFBIG),
    ("ENOSPC", libc::ENOSPC),
    ("ESPIPE", libc::ESPIPE),
    ("EROFS", libc::EROFS),
    ("EMLINK", libc::EMLINK),
    ("EPIPE", libc::EPIPE),
    ("EDOM", libc::EDOM),
    ("ERANGE", libc::ERANGE),
    ("EDEADLK", libc::EDEADLK),
    ("ENAMETOOLONG", libc::ENAMETOOLONG),
    ("ENOLCK", libc::ENOLCK),
    ("ENOSYS", libc::ENOSYS),
    ("ENOTEMPTY", libc::ENOTEMPTY),
    ("ELOOP", libc::ELOOP),
    ("ENOMSG", libc::ENOMSG),
    ("EIDRM", libc::EIDRM),
    ("ECHRNG", libc::ECHRNG),
    ("EL2NSYNC", libc::EL2NSYNC),
    ("EL3HLT", libc::EL3HLT),
    ("EL3RST", libc::EL3RST),
    ("ELNRNG", libc::ELNRNG),
    ("EUNATCH", libc::EUNATCH),
    ("ENOCSI", libc::ENOCSI),
    ("EL2HLT", libc::EL2HLT),
    ("EBADE", libc::EBADE),
    ("EBADR", libc::EBADR),
    ("EXFULL", libc::EXFULL),
    ("ENOANO", libc::ENOANO),
    ("EBADRQC", libc::EBADRQC),
    ("EBADSLT", libc::EBADSLT),
    ("EBFONT", libc::EBFONT),
    ("ENOSTR", libc::ENOSTR),
    ("ENODATA", libc::ENODATA),
    ("ETIME", libc::ETIME),
    ("ENOSR", libc::ENOSR),
    ("ENONET", libc::ENONET),
    ("ENOPKG", libc::ENOPKG),
    ("EREMOTE", libc::EREMOTE),
    ("ENOLINK", libc::ENOLINK),
    ("EADV", libc::EADV),
    ("ESRMNT", libc::ESRMNT),
    ("ECOMM", libc::ECOMM),
    ("EPROTO", libc::EPROTO),
    ("EMULTIHOP", libc::EMULTIHOP),
    ("EDOTDOT", libc::EDOTDOT),
    ("EBADMSG", libc::EBADMSG),
    ("EOVERFLOW", libc::EOVERFLOW),
    ("ENOTUNIQ", libc::ENOTUNIQ),
    ("EBADFD", libc::EBADFD),
    ("EREMCHG", libc::EREMCHG),
    ("ELIBACC", libc::ELIBACC),
    ("ELIBBAD", libc::ELIBBAD),
    ("ELIBSCN", libc::ELIBSCN),
    ("ELIBMAX", libc::ELIBMAX),
    ("ELIBEXEC", libc::ELIBEXEC),
    ("EILSEQ", libc::EILSEQ),
    ("ERESTART", libc::ERESTART),
    ("ESTRPIPE", libc::ESTRPIPE),
    ("EUSERS", libc::EUSERS),
    ("ENOTSOCK", libc::ENOTSOCK),
    ("EDESTADDRREQ", libc::EDESTADDRREQ),
    ("EMSGSIZE", libc::EMSGSIZE),
    ("EPROTOTYPE", libc::EPROTOTYPE),
    ("ENOPROTOOPT", libc::ENOPROTOOPT),
    ("EPROTONOSUPPORT", libc::EPROTONOSUPPORT),
    ("ESOCKTNOSUPPORT", libc::ESOCKTNOSUPPORT),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("EPFNOSUPPORT", libc::EPFNOSUPPORT),
    ("EAFNOSUPPORT", libc::EAFNOSUPPORT),
    ("EADDRINUSE", libc::EADDRINUSE),
    ("EADDRNOTAVAIL", libc::EADDRNOTAVAIL),
    ("ENETDOWN", libc::ENETDOWN),
    ("ENETUNREACH", libc::ENETUNREACH),
    ("ENETRESET", libc::ENETRESET),
    ("ECONNABORTED", libc::ECONNABORTED),
    ("ECONNRESET", libc::ECONNRESET),
    ("ENOBUFS", libc::ENOBUFS),
    ("EISCONN", libc::EISCONN),
    ("ENOTCONN", libc::ENOTCONN),
    ("ESHUTDOWN", libc::ESHUTDOWN),
    ("ETOOMANYREFS", libc::ETOOMANYREFS),
    ("ETIMEDOUT", libc::ETIMEDOUT),
    ("ECONNREFUSED", libc::ECONNREFUSED),
    ("EHOSTDOWN", libc::EHOSTDOWN),
    ("EHOSTUNREACH", libc::EHOSTUNREACH),
    ("EALREADY", libc::EALREADY),
    ("EINPROGRESS", libc::EINPROGRESS),
    ("ESTALE", libc::ESTALE),
    ("EUCLEAN", libc::EUCLEAN),
    ("ENOTNAM", libc::ENOTNAM),
    ("ENAVAIL", libc::ENAVAIL),
    ("EISNAM", libc::EISNAM),
    ("EREMOTEIO", libc::EREMOTEIO),
    ("EDQUOT", libc::EDQUOT),
    ("ENOMEDIUM", libc::ENOMEDIUM),
    ("EMEDIUMTYPE", libc::EMEDIUMTYPE),
    ("ECANCELED", libc::ECANCELED),
    ("ENOKEY", libc::ENOKEY),
    ("EKEYEXPIRED", libc::EKEYEXPIRED),
    ("EKEYREVOKED", libc::EKEYREVOKED),
    ("EKEYREJECTED", libc::EKEYREJECTED),
    ("EOWNERDEAD", libc::EOWNERDEAD),
    ("ENOTRECOVERABLE", libc::ENOTRECOVERABLE),
    ("ERFKILL", libc::ERFKILL),
    ("EHWPOISON", libc::EHWPOISON),
];

/// Second names Linux gives to a number; accepted on input, never printed.
const ALIASES: &[(&str, i32)] = &[
    ("EWOULDBLOCK", libc::EWOULDBLOCK),
    ("EDEADLOCK", libc::EDEADLOCK),
    ("ENOTSUP", libc::ENOTSUP),
];

/// The largest errno a system call can return (the kernel's MAX_ERRNO):
/// results in -MAX_ERRNO..=-1 are errors.
pub const MAX_ERRNO: i32 = 4095;

/// The canonical name of errno `e`, if Linux names it.
pub fn name(e: i32) -> Option<&'static str> {
    NAMES.iter().find(|&&(_, n)| n == e).map(|&(s, _)| s)
}

/// An errno by name (`EACCES`, any case, aliases too) or number
/// (`13`, 1..=MAX_ERRNO).
pub fn parse(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (1..=MAX_ERRNO).contains(&n).then_some(n);
    }
    let up = s.to_ascii_uppercase();
    NAMES
        .iter()
        .chain(ALIASES)
        .find(|&&(name, _)| name == up)
        .map(|&(_, n)| n)
}

/// Whether a raw call result is an error, and which.
pub fn of_result(r: i64) -> Option<i32> {
    (-(MAX_ERRNO as i64)..0).contains(&r).then(|| (-r) as i32)
}

/// `EACCES`, or `errno 200` for numbers Linux does not name.
pub fn display(e: i32) -> String {
    match name(e) {
        Some(s) => s.to_string(),
        None => format!("errno {e}"),
    }
}

/// Every accepted name with its number (tests, `--help`).
pub fn all_names() -> impl Iterator<Item = (&'static str, i32)> {
    NAMES.iter().chain(ALIASES).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_canonical_name_round_trips_and_numbers_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for &(n, e) in NAMES {
            assert_eq!(parse(n), Some(e), "{n}");
            assert_eq!(parse(&n.to_ascii_lowercase()), Some(e), "{n}");
            assert_eq!(name(e), Some(n), "{n}");
            assert_eq!(parse(&e.to_string()), Some(e));
            assert!(seen.insert(e), "{n} repeats {e}");
        }
        // 1..=133 without the two numbers Linux leaves unused
        assert_eq!(NAMES.len(), 131);
        assert_eq!(seen.iter().next(), Some(&1));
        assert_eq!(seen.iter().next_back(), Some(&133));
        assert!(!seen.contains(&41) && !seen.contains(&58));
    }

    #[test]
    fn aliases_map_to_their_canonical_number() {
        for &(a, e) in ALIASES {
            assert_eq!(parse(a), Some(e));
            assert!(name(e).is_some_and(|c| c != a), "{a}");
        }
        assert_eq!(parse("EWOULDBLOCK"), parse("EAGAIN"));
        assert_eq!(parse("ENOTSUP"), parse("EOPNOTSUPP"));
    }

    #[test]
    fn numbers_at_the_boundaries() {
        assert_eq!(parse("0"), None);
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("1"), Some(1));
        assert_eq!(parse("4095"), Some(4095));
        assert_eq!(parse("4096"), None);
        assert_eq!(parse("99999999999"), None);
        assert_eq!(parse("EFOO"), None);
        assert_eq!(parse(""), None);
        assert_eq!(display(4000), "errno 4000");
        assert_eq!(display(13), "EACCES");
    }

    #[test]
    fn results_in_the_error_range_are_errors() {
        assert_eq!(of_result(-1), Some(1));
        assert_eq!(of_result(-4095), Some(4095));
        assert_eq!(of_result(-4096), None);
        assert_eq!(of_result(0), None);
        assert_eq!(of_result(3), None);
        assert_eq!(of_result(i64::MIN), None);
    }
}

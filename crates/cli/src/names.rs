//! Names the user gives that the system resolves: a user (`--owner`) and
//! the program `tag run` starts. Each failure carries its exit code: what
//! is missing exits 5, what may not be run exits 4.

use crate::exit::{Failure, EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_PERMISSION};
use std::path::PathBuf;

/// The uid of `--owner`: a user name or a uid, which must exist (exit 5
/// otherwise: a tag owned by nobody who can log in could not be deleted by
/// its owner).
pub fn user_uid(who: &str) -> Result<u32, Failure> {
    let unknown = || Failure::new(EXIT_NOT_FOUND, format!("no such user: {who:?}"));
    let c = std::ffi::CString::new(who).map_err(|_| unknown())?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: passwd is plain data that getpw*_r fills in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives it and its
    // length is passed; a number is looked up as a uid, anything else as a
    // name.
    let rc = unsafe {
        match who.parse::<u32>() {
            Ok(uid) => libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out),
            Err(_) => libc::getpwnam_r(
                c.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            ),
        }
    };
    if rc != 0 {
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "cannot look up user {who:?}: {}",
                std::io::Error::from_raw_os_error(rc)
            ),
        ));
    }
    if out.is_null() {
        return Err(unknown());
    }
    Ok(pw.pw_uid)
}

/// The program `tag run` is to start, found the way execvp(3) finds it,
/// before any tag is set: a command that cannot start must leave no trace
/// (no `set` in a lifeline). Not found: exit 5; found but not executable:
/// exit 4 (the shell's 127 and 126).
pub fn find_program(cmd: &str) -> Result<PathBuf, Failure> {
    use std::os::unix::ffi::OsStrExt;
    let runnable = |p: &std::path::Path| {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: c is a valid NUL-terminated path.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    let not_executable = |p: &std::path::Path| {
        Failure::new(
            EXIT_PERMISSION,
            format!("cannot run {}: not an executable file", p.display()),
        )
    };
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return if runnable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(not_executable(&p))
        } else {
            Err(Failure::new(
                EXIT_NOT_FOUND,
                format!("cannot run {cmd}: no such file"),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut seen = None;
    if !cmd.is_empty() {
        for dir in std::env::split_paths(&path) {
            // An empty PATH entry is the current directory, as for execvp.
            let p = if dir.as_os_str().is_empty() {
                PathBuf::from(cmd)
            } else {
                dir.join(cmd)
            };
            if runnable(&p) {
                return Ok(p);
            }
            if seen.is_none() && p.exists() {
                seen = Some(p);
            }
        }
    }
    match seen {
        Some(p) => Err(not_executable(&p)),
        None => Err(Failure::new(
            EXIT_NOT_FOUND,
            format!("cannot run {cmd:?}: command not found in PATH"),
        )),
    }
}

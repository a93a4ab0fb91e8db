//! errno values in plain words for `mantle doctor` details, e.g.
//! `EPERM (Operation not permitted)`, including the kernel-internal
//! ENOTSUPP (524) that bpf(2) leaks to user space.

use std::io;

/// `EPERM (Operation not permitted)`.
pub(super) fn errno_words(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        ENOTSUPP => return "ENOTSUPP (operation not supported by this kernel)".into(),
        _ => "",
    };
    let text = io::Error::from_raw_os_error(e).to_string();
    let text = text
        .strip_suffix(&format!(" (os error {e})"))
        .unwrap_or(&text)
        .to_string();
    if name.is_empty() {
        format!("errno {e} ({text})")
    } else {
        format!("{name} ({text})")
    }
}

/// The kernel-internal "not supported" errno that BPF returns to user space.
pub(super) const ENOTSUPP: i32 = 524;

pub(super) fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

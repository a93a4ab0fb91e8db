//! seccomp: installing a classic-BPF system-call filter, and the user
//! notification fd that lets a supervisor answer a filtered system call on
//! the caller's behalf.
//!
//! Kernel interfaces (seccomp(2), seccomp_unotify(2)):
//! * `seccomp(SECCOMP_SET_MODE_FILTER, flags, &sock_fprog)` (Linux 3.17);
//!   `SECCOMP_FILTER_FLAG_NEW_LISTENER` and `SECCOMP_RET_USER_NOTIF`
//!   (Linux 5.0) return the notification fd.
//! * ioctls on that fd: `SECCOMP_IOCTL_NOTIF_RECV`, `_SEND`, `_ID_VALID`
//!   (5.0; ID_VALID renumbered from _IOR to _IOW in 5.8, the old number
//!   still accepted) and `_ADDFD` (5.9).
//! * `seccomp(SECCOMP_GET_NOTIF_SIZES)` (5.0): the kernel's struct sizes.
//!
//! Invariants:
//! * A filter stays with the thread (and its future children) for life; it
//!   cannot be removed. Installing one needs `PR_SET_NO_NEW_PRIVS` or
//!   CAP_SYS_ADMIN: [`set_no_new_privs`] first.
//! * The notification fd is a [`Listener`] that owns it; dropping it makes
//!   every pending and future notified system call of the target fail with
//!   ENOSYS (seccomp_unotify(2), "NOTES").
//! * The notif/resp/addfd structs are libc's, checked against the uapi
//!   sizes below; [`Listener::recv`] reads into a zeroed buffer of the
//!   kernel's size when that is larger (a newer kernel), as
//!   seccomp_unotify(2) asks.
//! * Errors are [`Error`], naming the step and keeping the errno as the
//!   `io::Error` source.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub use libc::{seccomp_data, seccomp_notif, seccomp_notif_addfd, seccomp_notif_resp, sock_filter};

// Sizes in the uapi header (linux/seccomp.h), which the kernel reports
// through SECCOMP_GET_NOTIF_SIZES.
const _: () = assert!(std::mem::size_of::<seccomp_data>() == 64);
const _: () = assert!(std::mem::size_of::<seccomp_notif>() == 80);
const _: () = assert!(std::mem::size_of::<seccomp_notif_resp>() == 24);
const _: () = assert!(std::mem::size_of::<seccomp_notif_addfd>() == 24);
const _: () = assert!(std::mem::offset_of!(seccomp_data, nr) == 0);
const _: () = assert!(std::mem::offset_of!(seccomp_data, arch) == 4);
const _: () = assert!(std::mem::offset_of!(seccomp_notif, data) == 16);

/// SECCOMP_GET_NOTIF_SIZES (linux/seccomp.h).
const SECCOMP_GET_NOTIF_SIZES: libc::c_uint = 3;
/// SECCOMP_ADDFD_FLAG_SETFD: install at exactly `newfd`.
pub const SECCOMP_ADDFD_FLAG_SETFD: u32 = 1 << 0;
/// SECCOMP_ADDFD_FLAG_SEND: install and answer with the new fd number, atomically (5.14).
pub const SECCOMP_ADDFD_FLAG_SEND: u32 = 1 << 1;
/// SECCOMP_USER_NOTIF_FLAG_CONTINUE: let the system call run as if no
/// filter had stopped it (5.5).
pub const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1 << 0;

/// The AUDIT_ARCH_* value of this target (linux/audit.h), which a filter
/// must check before trusting `seccomp_data.nr`.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xC000_003E; // EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xC000_00B7; // EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE

/// What failed, with the errno as the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("prctl(PR_SET_NO_NEW_PRIVS) refused")]
    NoNewPrivs(#[source] io::Error),
    #[error("seccomp(SECCOMP_SET_MODE_FILTER) refused the filter")]
    Install(#[source] io::Error),
    #[error("seccomp(SECCOMP_GET_NOTIF_SIZES) failed")]
    Sizes(#[source] io::Error),
    #[error("SECCOMP_IOCTL_NOTIF_RECV failed")]
    Recv(#[source] io::Error),
    #[error("SECCOMP_IOCTL_NOTIF_SEND failed")]
    Send(#[source] io::Error),
    #[error("SECCOMP_IOCTL_NOTIF_ID_VALID failed")]
    IdValid(#[source] io::Error),
    #[error("SECCOMP_IOCTL_NOTIF_ADDFD failed")]
    AddFd(#[source] io::Error),
    #[error("SECCOMP_IOCTL_NOTIF_SET_FLAGS failed")]
    SetFlags(#[source] io::Error),
}

impl Error {
    /// The errno the kernel answered with.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::NoNewPrivs(e)
            | Error::Install(e)
            | Error::Sizes(e)
            | Error::Recv(e)
            | Error::Send(e)
            | Error::IdValid(e)
            | Error::AddFd(e)
            | Error::SetFlags(e) => e.raw_os_error(),
        }
    }
}

const fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// A filter that allows everything (what the `mantle doctor` probe installs).
pub const ALLOW_ALL: [sock_filter; 1] =
    [stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW)];

/// A filter that sends system call `nr` of this architecture to the
/// listener and allows everything else; another architecture's calls
/// (e.g. int 0x80 on x86-64) are killed, since their numbers differ.
pub const fn notify_on(nr: libc::c_long) -> [sock_filter; 7] {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    [
        stmt(BPF_LD | BPF_W | BPF_ABS, 4), // seccomp_data.arch
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD | BPF_W | BPF_ABS, 0), // seccomp_data.nr
        jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, 0, 1),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// __X32_SYSCALL_BIT (asm/unistd.h): set in the number of an x32 call.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Compares per block of [`notify_on_set`]: a conditional jump's offset is
/// 8 bits, so each block's compares jump to a `RET NOTIFY` of their own.
const BLOCK: usize = 200;

/// A filter that sends every system call in `nrs` of this architecture to
/// the listener and allows everything else (another architecture's calls
/// are killed, as in [`notify_on`]). One compare per call, in blocks of
/// `BLOCK` that each end in `JA +1; RET NOTIFY` (an unconditional jump
/// has a 32-bit offset), so any number of calls fits; the filter depends
/// on the call number only, so the kernel caches its ALLOW verdicts per
/// number (seccomp's action cache, Linux 5.11) and the calls that are not
/// interposed do not run it.
///
/// `launch_cookie`: a `sendmsg` whose sixth argument (unused by sendmsg)
/// is this value is always allowed. The launcher passes the new listener
/// to the executive with such a sendmsg after installing the filter; were
/// sendmsg interposed, it would wait for an executive that does not have
/// the listener yet. The cookie is random, lives only in the launcher and
/// in the child before its exec, and the filter cannot be read back
/// without CAP_SYS_ADMIN, so a guest cannot use it. Only sendmsg's
/// verdict depends on an argument: every other call's stays cacheable.
pub fn notify_on_set(nrs: &[u32], launch_cookie: Option<u64>) -> Vec<sock_filter> {
    filter(nrs, &[], launch_cookie)
}

/// [`notify_on_set`] with refusals: each `(nr, errno)` of `refuse` fails
/// with that errno in the kernel, before any notification (the filter is
/// the enforcement layer: nothing in the guest can undo it, and the
/// executive never sees the call). A number in both lists is refused.
/// errno is clamped to 1..=4095 (the range a system call can return).
pub fn filter(nrs: &[u32], refuse: &[(u32, i32)], launch_cookie: Option<u64>) -> Vec<sock_filter> {
    use libc::{BPF_ABS, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let mut f = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, 4),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        // x32 calls share x86-64's AUDIT_ARCH with __X32_SYSCALL_BIT set
        // in the number: `0x40000000 | openat` would match no compare
        // below and be allowed on a kernel built with x32. Refused.
        jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 0, 1),
        stmt(
            BPF_RET | BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ),
    ];
    if let Some(c) = launch_cookie {
        // seccomp_data.args[5] at 16 + 5 * 8, little-endian halves
        f.extend([
            jump(BPF_JMP | BPF_JEQ | BPF_K, libc::SYS_sendmsg as u32, 0, 5),
            stmt(BPF_LD | BPF_W | BPF_ABS, 56),
            jump(BPF_JMP | BPF_JEQ | BPF_K, c as u32, 0, 3),
            stmt(BPF_LD | BPF_W | BPF_ABS, 60),
            jump(BPF_JMP | BPF_JEQ | BPF_K, (c >> 32) as u32, 0, 1),
            stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
            stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        ]);
    }
    for &(nr, errno) in refuse {
        let e = errno.clamp(1, 4095) as u32;
        f.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
        f.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ERRNO | e));
    }
    for block in nrs.chunks(BLOCK) {
        let k = block.len();
        // compare i (of k) jumps over the rest and the JA to the NOTIFY
        for (i, &nr) in block.iter().enumerate() {
            f.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, (k - i) as u8, 0));
        }
        f.push(stmt(BPF_JMP | BPF_JA, 1));
        f.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF));
    }
    f.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    f
}

/// Sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on listener `fd` (one ioctl,
/// no allocation: usable in a probe's forked child). Linux 6.6.
pub fn set_sync_wake_up_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<(), Error> {
    // SAFETY: the flags argument is passed by value (an integer).
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
    if rc < 0 {
        return Err(Error::SetFlags(io::Error::last_os_error()));
    }
    Ok(())
}

/// SECCOMP_IOCTL_NOTIF_SET_FLAGS (linux/seccomp.h, 6.6): _IOW('!', 4, __u64).
const SECCOMP_IOCTL_NOTIF_SET_FLAGS: libc::c_ulong = 0x4008_2104;
/// SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (6.6): wake the supervisor on the
/// notifying thread's CPU, and the thread on the supervisor's answer.
pub const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// PR_SET_NO_NEW_PRIVS: the caller and its children can never gain
/// privileges through execve; required to install a filter without
/// CAP_SYS_ADMIN. Async-signal-safe (one system call).
pub fn set_no_new_privs() -> Result<(), Error> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(Error::NoNewPrivs(io::Error::last_os_error()));
    }
    Ok(())
}

fn set_filter(filter: &[sock_filter], flags: libc::c_ulong) -> Result<libc::c_long, Error> {
    let prog = libc::sock_fprog {
        len: filter.len().min(u16::MAX as usize) as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prog points to `len` valid instructions that outlive the
    // call; the kernel copies the program and never writes through the
    // pointer (the *mut is only the C declaration's).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(Error::Install(io::Error::last_os_error()));
    }
    Ok(rc)
}

/// Installs `filter` on the calling thread (see [`set_no_new_privs`]).
/// Async-signal-safe (one system call).
pub fn install(filter: &[sock_filter]) -> Result<(), Error> {
    set_filter(filter, 0).map(|_| ())
}

/// Installs `filter` with SECCOMP_FILTER_FLAG_NEW_LISTENER and returns the
/// notification fd, without asking for the kernel's struct sizes:
/// async-signal-safe (one system call), for a child between fork and exec.
/// The fd is close-on-exec (the kernel opens it O_CLOEXEC).
pub fn install_listener_fd(filter: &[sock_filter]) -> Result<OwnedFd, Error> {
    let fd = set_filter(
        filter,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as libc::c_ulong,
    )?;
    // SAFETY: with NEW_LISTENER, a successful seccomp returns a new fd that
    // nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Installs `filter` with SECCOMP_FILTER_FLAG_NEW_LISTENER and returns the
/// [`Listener`] on which its USER_NOTIF system calls arrive.
pub fn install_with_listener(filter: &[sock_filter]) -> Result<Listener, Error> {
    Listener::from_fd(install_listener_fd(filter)?)
}

/// The kernel's (seccomp_notif, seccomp_notif_resp, seccomp_data) sizes.
pub fn notif_sizes() -> Result<(u16, u16, u16), Error> {
    let mut s = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: the kernel writes a struct seccomp_notif_sizes (3 x u16) to s.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut s as *mut libc::seccomp_notif_sizes,
        )
    };
    if rc < 0 {
        return Err(Error::Sizes(io::Error::last_os_error()));
    }
    Ok((s.seccomp_notif, s.seccomp_notif_resp, s.seccomp_data))
}

/// A seccomp notification fd (the supervisor's end).
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    /// The kernel's sizeof(struct seccomp_notif), at least ours.
    notif_size: usize,
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Listener {
    /// Wraps a notification fd (from [`install_listener_fd`], or received
    /// from the filtered process).
    pub fn from_fd(fd: OwnedFd) -> Result<Listener, Error> {
        let (n, _, _) = notif_sizes()?;
        Ok(Listener {
            fd,
            notif_size: (n as usize).max(std::mem::size_of::<seccomp_notif>()),
        })
    }

    /// SECCOMP_IOCTL_NOTIF_RECV: waits for the next notified system call.
    /// EINTR (a signal) and ENOENT (the caller died before it was read)
    /// come back as errors to retry.
    pub fn recv(&self) -> Result<seccomp_notif, Error> {
        // The kernel refuses (EINVAL) a buffer that is not zeroed. On the
        // stack when the kernel's struct fits (no allocation per call).
        let words = self.notif_size.div_ceil(8);
        let mut stack = [0u64; 32];
        let mut heap;
        let buf: &mut [u64] = if words <= stack.len() {
            &mut stack[..words]
        } else {
            heap = vec![0u64; words];
            &mut heap
        };
        // SAFETY: buf is zeroed, 8-aligned and at least the kernel's
        // sizeof(struct seccomp_notif), which it writes.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                buf.as_mut_ptr(),
            )
        };
        if rc < 0 {
            return Err(Error::Recv(io::Error::last_os_error()));
        }
        // SAFETY: buf holds at least size_of::<seccomp_notif>() initialised
        // bytes, 8-aligned, and seccomp_notif is plain integers.
        Ok(unsafe { std::ptr::read(buf.as_ptr().cast::<seccomp_notif>()) })
    }

    /// SECCOMP_IOCTL_NOTIF_SEND: answers notification `resp.id`.
    pub fn send(&self, resp: &seccomp_notif_resp) -> Result<(), Error> {
        let mut r = *resp;
        // SAFETY: r is a valid seccomp_notif_resp the kernel reads.
        let rc =
            unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut r) };
        if rc < 0 {
            return Err(Error::Send(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Answers notification `id` with return value `val` (errno 0).
    pub fn reply(&self, id: u64, val: i64) -> Result<(), Error> {
        self.send(&seccomp_notif_resp {
            id,
            val,
            error: 0,
            flags: 0,
        })
    }

    /// Answers notification `id` with `-errno`.
    pub fn reply_error(&self, id: u64, errno: i32) -> Result<(), Error> {
        self.send(&seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        })
    }

    /// Lets notification `id`'s system call run unchanged
    /// (SECCOMP_USER_NOTIF_FLAG_CONTINUE; see seccomp_unotify(2) for why a
    /// supervisor must not base a security decision on this).
    pub fn reply_continue(&self, id: u64) -> Result<(), Error> {
        self.send(&seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags: SECCOMP_USER_NOTIF_FLAG_CONTINUE,
        })
    }

    /// SECCOMP_IOCTL_NOTIF_SET_FLAGS with SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
    /// (Linux 6.6): the kernel wakes the supervisor synchronously on the
    /// notifying thread's CPU. EINVAL/ENOTTY on older kernels.
    pub fn set_sync_wake_up(&self) -> Result<(), Error> {
        set_sync_wake_up_fd(self.fd.as_fd())
    }

    /// SECCOMP_IOCTL_NOTIF_ID_VALID: whether notification `id` is still
    /// pending (its thread alive and waiting). Check it after reading the
    /// target's memory, before acting on what was read.
    pub fn id_valid(&self, id: u64) -> Result<bool, Error> {
        let mut id = id;
        // SAFETY: the kernel reads one u64 through the pointer.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id as *mut u64,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOENT) {
            return Ok(false);
        }
        Err(Error::IdValid(e))
    }

    /// SECCOMP_IOCTL_NOTIF_ADDFD: installs a duplicate of `src` in the
    /// target of notification `id`; returns the fd number it got there.
    /// `flags`: [`SECCOMP_ADDFD_FLAG_SETFD`] (then at `newfd`) and/or
    /// [`SECCOMP_ADDFD_FLAG_SEND`]; `newfd_flags`: O_CLOEXEC or 0.
    pub fn addfd(
        &self,
        id: u64,
        src: BorrowedFd,
        newfd: u32,
        flags: u32,
        newfd_flags: u32,
    ) -> Result<i32, Error> {
        let mut a = seccomp_notif_addfd {
            id,
            flags,
            srcfd: src.as_raw_fd() as u32,
            newfd,
            newfd_flags,
        };
        // SAFETY: a is a valid seccomp_notif_addfd the kernel reads; src is
        // a live fd for the duration of the call.
        let rc =
            unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut a) };
        if rc < 0 {
            return Err(Error::AddFd(io::Error::last_os_error()));
        }
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{self, Exit};

    #[test]
    fn filters_are_well_formed() {
        let f = notify_on(libc::SYS_getppid);
        assert_eq!(f.len(), 7);
        // the arch test falls through to the nr test, else kills
        assert_eq!((f[1].jt, f[1].jf), (1, 0));
        // the nr test: USER_NOTIF if equal, else the final ALLOW
        assert_eq!((f[4].jt, f[4].jf), (0, 1));
        assert_eq!(f[5].k, libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(f[6].k, libc::SECCOMP_RET_ALLOW);
        assert_eq!(ALLOW_ALL[0].k, libc::SECCOMP_RET_ALLOW);
    }

    /// Runs a filter made of the instructions notify_on_set emits (LD ABS,
    /// JEQ, JA, RET) on (arch, nr): the verdict.
    fn verdict(f: &[sock_filter], arch: u32, nr: u32, arg5: u64) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = f[pc];
            match i.code as u32 {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    acc = match i.k {
                        0 => nr,
                        4 => arch,
                        56 => arg5 as u32,
                        60 => (arg5 >> 32) as u32,
                        k => panic!("load of offset {k}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += 1 + if acc == i.k { i.jt } else { i.jf } as usize;
                }
                c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => {
                    pc += 1 + if acc >= i.k { i.jt } else { i.jf } as usize;
                }
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += 1 + i.k as usize,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c => panic!("unexpected instruction {c:#x}"),
            }
        }
    }

    /// For sets of every size around the block boundary and beyond, every
    /// call number 0..1024 is notified if and only if it is in the set;
    /// another architecture is killed.
    #[test]
    fn set_filters_notify_exactly_their_calls() {
        let cookie = 0x0123_4567_89ab_cdef_u64;
        let sendmsg = libc::SYS_sendmsg as u32;
        for n in [0usize, 1, 3, 199, 200, 201, 399, 400, 401, 362, 1024] {
            // a spread of numbers, not 0..n, so blocks hold unsorted calls
            let set: Vec<u32> = (0..n as u32).map(|i| (i * 7) % 1024).collect();
            for launch in [None, Some(cookie)] {
                let f = notify_on_set(&set, launch);
                assert!(f.len() <= 4096, "BPF_MAXINSNS");
                for nr in 0..1024u32 {
                    let want = if set.contains(&nr) {
                        libc::SECCOMP_RET_USER_NOTIF
                    } else {
                        libc::SECCOMP_RET_ALLOW
                    };
                    // any sixth argument but the cookie changes nothing
                    for a5 in [0, cookie ^ 1, cookie ^ (1 << 40)] {
                        assert_eq!(verdict(&f, AUDIT_ARCH, nr, a5), want, "set of {n}, nr {nr}");
                    }
                    let with_cookie = if launch.is_some() && nr == sendmsg {
                        libc::SECCOMP_RET_ALLOW
                    } else {
                        want
                    };
                    assert_eq!(verdict(&f, AUDIT_ARCH, nr, cookie), with_cookie, "nr {nr}");
                }
                assert_eq!(
                    verdict(&f, 0x4000_0003, 1, 0),
                    libc::SECCOMP_RET_KILL_PROCESS
                );
            }
        }
    }

    /// Refusals win over notification and leave every other number's
    /// verdict as it was, for every call number 0..1024.
    #[test]
    fn refusals_fail_exactly_their_calls_with_their_errno() {
        let notify: Vec<u32> = (0..300u32).map(|i| (i * 5) % 1024).collect();
        let refuse: Vec<(u32, i32)> = (0..40u32)
            .map(|i| (i * 13 % 1024, (i + 1) as i32))
            .collect();
        let f = filter(&notify, &refuse, None);
        for nr in 0..1024u32 {
            let want = match refuse.iter().find(|r| r.0 == nr) {
                Some(&(_, e)) => libc::SECCOMP_RET_ERRNO | e as u32,
                None if notify.contains(&nr) => libc::SECCOMP_RET_USER_NOTIF,
                None => libc::SECCOMP_RET_ALLOW,
            };
            assert_eq!(verdict(&f, AUDIT_ARCH, nr, 0), want, "nr {nr}");
        }
        // x32 numbers (bit 30) are refused whatever the lists say, even
        // one whose low bits name a notified or allowed call
        for nr in [0u32, 1, 257, 0x4d41] {
            for f in [filter(&notify, &refuse, None), notify_on_set(&[], None)] {
                assert_eq!(
                    verdict(&f, AUDIT_ARCH, X32_SYSCALL_BIT | nr, 0),
                    libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
                );
            }
        }
        // out-of-range errnos are clamped, never another action
        let f = filter(&[], &[(1, 0), (2, 99_999)], None);
        assert_eq!(verdict(&f, AUDIT_ARCH, 1, 0), libc::SECCOMP_RET_ERRNO | 1);
        assert_eq!(
            verdict(&f, AUDIT_ARCH, 2, 0),
            libc::SECCOMP_RET_ERRNO | 4095
        );
    }

    /// A child installs a filter that notifies on getppid; the parent
    /// receives the notification, checks it, and answers with 4242, which
    /// the child sees as getppid's return value.
    #[test]
    #[ignore = "needs root for pidfd_getfd (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
    fn child_getppid_answered_by_parent() {
        let _g = crate::test_serial();
        mantle_testsupport::require_root(
            "child_getppid_answered_by_parent (pidfd_getfd of the child's listener)",
        );
        let filter = notify_on(libc::SYS_getppid);
        let (r, w) = os::pipe().expect("pipe");
        let run = move || {
            if set_no_new_privs().is_err() {
                return 10;
            }
            let Ok(fd) = install_listener_fd(&filter) else {
                return 11;
            };
            let n = fd.as_raw_fd().to_ne_bytes();
            if os::write_all_raw(w.as_fd(), &n).is_err() {
                return 12;
            }
            // SAFETY: getppid takes no arguments.
            let v = unsafe { libc::syscall(libc::SYS_getppid) };
            if v == 4242 {
                0
            } else {
                13
            }
        };
        // SAFETY: the child runs only system calls (prctl, seccomp, write,
        // getppid) on memory prepared before the fork, then _exit.
        let child = unsafe { os::fork_child(run) }.expect("fork");
        // (the parent's write end went with the unrun closure)
        let mut n = [0u8; 4];
        os::read_exact_raw(r.as_fd(), &mut n).expect("fd number from the child");
        let pidfd = os::pidfd_open(child.pid(), false).expect("pidfd_open");
        let fd = os::pidfd_getfd(pidfd.as_fd(), i32::from_ne_bytes(n)).expect("pidfd_getfd");
        let l = Listener::from_fd(fd).expect("listener");
        let notif = l.recv().expect("recv");
        assert_eq!(notif.pid, child.pid());
        assert_eq!(i64::from(notif.data.nr), libc::SYS_getppid);
        assert_eq!(notif.data.arch, AUDIT_ARCH);
        assert!(l.id_valid(notif.id).expect("id_valid"));
        l.reply(notif.id, 4242).expect("send");
        assert_eq!(child.wait().expect("wait"), Exit::Code(0));
        // answered and gone: the id is no longer valid
        assert!(!l.id_valid(notif.id).expect("id_valid after exit"));
    }

    /// ADDFD with SEND: the parent answers the child's getppid by
    /// installing a pipe's write end in the child; getppid returns the new
    /// fd number, close-on-exec as asked, and the child writes through it.
    #[test]
    #[ignore = "needs root for pidfd_getfd (scripts/test.sh runs it; or cargo test -- --include-ignored as root)"]
    fn child_receives_an_fd_as_the_answer() {
        let _g = crate::test_serial();
        mantle_testsupport::require_root(
            "child_receives_an_fd_as_the_answer (pidfd_getfd of the child's listener)",
        );
        let filter = notify_on(libc::SYS_getppid);
        let (r, w) = os::pipe().expect("pipe");
        let (data_r, data_w) = os::pipe().expect("pipe");
        let inherited = data_w.as_raw_fd();
        let run = move || {
            if set_no_new_privs().is_err() {
                return 10;
            }
            let Ok(fd) = install_listener_fd(&filter) else {
                return 11;
            };
            if os::write_all_raw(w.as_fd(), &fd.as_raw_fd().to_ne_bytes()).is_err() {
                return 12;
            }
            // SAFETY: getppid takes no arguments.
            let v = unsafe { libc::syscall(libc::SYS_getppid) } as i32;
            if v < 0 || v == inherited {
                return 13;
            }
            // SAFETY: fcntl with integer arguments.
            if unsafe { libc::fcntl(v, libc::F_GETFD) } != libc::FD_CLOEXEC {
                return 14;
            }
            // SAFETY: v is the fd the supervisor just installed.
            let got = unsafe { BorrowedFd::borrow_raw(v) };
            if os::write_all_raw(got, b"ok").is_err() {
                return 15;
            }
            0
        };
        // SAFETY: the child runs only system calls (prctl, seccomp, write,
        // getppid, fcntl) on memory prepared before the fork, then _exit.
        let child = unsafe { os::fork_child(run) }.expect("fork");
        let mut n = [0u8; 4];
        os::read_exact_raw(r.as_fd(), &mut n).expect("fd number from the child");
        let pidfd = os::pidfd_open(child.pid(), false).expect("pidfd_open");
        let fd = os::pidfd_getfd(pidfd.as_fd(), i32::from_ne_bytes(n)).expect("pidfd_getfd");
        let l = Listener::from_fd(fd).expect("listener");
        let notif = l.recv().expect("recv");
        let newfd = l
            .addfd(
                notif.id,
                data_w.as_fd(),
                0,
                SECCOMP_ADDFD_FLAG_SEND,
                libc::O_CLOEXEC as u32,
            )
            .expect("addfd");
        assert!(newfd >= 0);
        drop(data_w);
        assert_eq!(child.wait().expect("wait"), Exit::Code(0));
        let mut got = [0u8; 2];
        os::read_exact_raw(data_r.as_fd(), &mut got).expect("read what the child wrote");
        assert_eq!(&got, b"ok");
    }
}

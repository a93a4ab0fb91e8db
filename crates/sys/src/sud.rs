//! Syscall User Dispatch (SUD): the kernel turns the calling thread's
//! system calls into SIGSYS while a selector byte in its memory says
//! "block", except for calls made from one excluded address range.
//!
//! Kernel interface: `prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON,
//! offset, len, selector)` and `..._OFF` (Linux 5.11, commit 1446e1df9eb1
//! "kernel: Implement selective syscall userspace redirection"; on
//! architectures with generic entry code, x86-64 among them). See
//! Documentation/admin-guide/syscall-user-dispatch.rst.
//!
//! Invariants:
//! * The kernel reads the selector byte on every system call entry of the
//!   thread while dispatch is on, so the byte must outlive it: [`enable`]
//!   takes a `&'static` [`Selector`].
//! * A diverted call arrives as SIGSYS with `si_code == SYS_USER_DISPATCH`;
//!   its handler must set the selector to ALLOW before returning, or the
//!   `rt_sigreturn` the handler returns through is itself diverted (unless
//!   it lies in the excluded range).
//! * Dispatch is per thread, is cleared by execve and by fork in the child.

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};

/// PR_SET_SYSCALL_USER_DISPATCH (linux/prctl.h).
pub const PR_SET_SYSCALL_USER_DISPATCH: libc::c_int = 59;
/// PR_SYS_DISPATCH_OFF.
pub const PR_SYS_DISPATCH_OFF: libc::c_ulong = 0;
/// PR_SYS_DISPATCH_ON (called PR_SYS_DISPATCH_EXCLUSIVE_ON since 6.16,
/// same value): divert every call outside [offset, offset + len).
pub const PR_SYS_DISPATCH_ON: libc::c_ulong = 1;
/// Selector values (linux/prctl.h).
pub const SYSCALL_DISPATCH_FILTER_ALLOW: u8 = 0;
pub const SYSCALL_DISPATCH_FILTER_BLOCK: u8 = 1;
/// `si_code` of a SIGSYS from SUD (asm-generic/siginfo.h).
pub const SYS_USER_DISPATCH: i32 = 2;

/// The selector byte: [`Selector::block`] diverts the thread's system
/// calls, [`Selector::allow`] lets them through. An atomic so that a
/// signal handler may flip it.
#[derive(Debug)]
pub struct Selector(AtomicU8);

impl Selector {
    /// A selector that allows (dispatch on, nothing diverted yet).
    pub const fn new() -> Selector {
        Selector(AtomicU8::new(SYSCALL_DISPATCH_FILTER_ALLOW))
    }
    pub fn allow(&self) {
        self.0
            .store(SYSCALL_DISPATCH_FILTER_ALLOW, Ordering::SeqCst);
    }
    pub fn block(&self) {
        self.0
            .store(SYSCALL_DISPATCH_FILTER_BLOCK, Ordering::SeqCst);
    }
    pub fn is_blocking(&self) -> bool {
        self.0.load(Ordering::SeqCst) == SYSCALL_DISPATCH_FILTER_BLOCK
    }
}

impl Default for Selector {
    fn default() -> Self {
        Selector::new()
    }
}

/// Turns dispatch on for the calling thread: while `selector` blocks,
/// system calls made from outside [`exclude_start`, `exclude_start +
/// exclude_len`) raise SIGSYS instead of running. Async-signal-safe (one
/// system call). EINVAL: kernel without SUD (before 5.11, or no generic
/// entry code).
pub fn enable(
    selector: &'static Selector,
    exclude_start: usize,
    exclude_len: usize,
) -> io::Result<()> {
    // SAFETY: the selector is 'static, so the kernel's reads of it on
    // every system call entry stay valid for as long as dispatch is on.
    let r = unsafe {
        libc::prctl(
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_ON,
            exclude_start as libc::c_ulong,
            exclude_len as libc::c_ulong,
            selector.0.as_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Turns dispatch off for the calling thread. Async-signal-safe.
pub fn disable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The SIGSYS fields of a siginfo (`_sifields._sigsys` in
/// asm-generic/siginfo.h): which system call was diverted, from where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sigsys {
    /// si_code: [`SYS_USER_DISPATCH`] for SUD, SYS_SECCOMP (1) for seccomp.
    pub code: i32,
    /// The address after the system call instruction.
    pub call_addr: usize,
    /// The system call number.
    pub syscall: i32,
    /// The AUDIT_ARCH_* of the call.
    pub arch: u32,
}

/// The SIGSYS fields of `info` (meaningful when `info.si_signo == SIGSYS`).
pub fn sigsys(info: &libc::siginfo_t) -> Sigsys {
    // Layout of siginfo_t on 64-bit Linux: si_signo, si_errno, si_code
    // (3 x int) and 4 bytes of padding, then the union: for SIGSYS
    // { void *_call_addr; int _syscall; unsigned int _arch; }.
    const UNION: usize = 16;
    const _: () = assert!(std::mem::size_of::<libc::siginfo_t>() >= UNION + 16);
    const _: () = assert!(usize::BITS == 64, "the offsets above are the 64-bit layout");
    let p = (info as *const libc::siginfo_t).cast::<u8>();
    // SAFETY: siginfo_t is 128 bytes of plain data, so the reads at
    // 16..32 are inside the referenced struct; read_unaligned needs no
    // alignment.
    unsafe {
        Sigsys {
            code: info.si_code,
            call_addr: std::ptr::read_unaligned(p.add(UNION).cast::<usize>()),
            syscall: std::ptr::read_unaligned(p.add(UNION + 8).cast::<i32>()),
            arch: std::ptr::read_unaligned(p.add(UNION + 12).cast::<u32>()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{self, Exit};
    use std::sync::atomic::AtomicI32;

    static SELECTOR: Selector = Selector::new();
    static SEEN_NR: AtomicI32 = AtomicI32::new(-1);
    static SEEN_CODE: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t.
        let s = sigsys(unsafe { &*info });
        SEEN_NR.store(s.syscall, Ordering::SeqCst);
        SEEN_CODE.store(s.code, Ordering::SeqCst);
        // let rt_sigreturn through
        SELECTOR.allow();
    }

    fn divert_getppid() -> i32 {
        // SAFETY: sigaction is plain data; all-zero is a valid value.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_sigsys as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        // SAFETY: installs a handler that only touches atomics.
        if unsafe { libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) } != 0 {
            return 10;
        }
        if enable(&SELECTOR, 0, 0).is_err() {
            return 11;
        }
        SELECTOR.block();
        // SAFETY: getppid takes no arguments; here it is diverted to SIGSYS.
        unsafe { libc::syscall(libc::SYS_getppid) };
        if SELECTOR.is_blocking() {
            return 12;
        }
        if disable().is_err() {
            return 13;
        }
        if SEEN_NR.load(Ordering::SeqCst) as libc::c_long != libc::SYS_getppid {
            return 14;
        }
        if SEEN_CODE.load(Ordering::SeqCst) != SYS_USER_DISPATCH {
            return 15;
        }
        0
    }

    /// In a child: SUD on, selector on block, getppid arrives as a SIGSYS
    /// with the right number and si_code.
    #[test]
    fn child_sees_sigsys_for_getppid() {
        let _g = crate::test_serial();
        // SAFETY: the child only installs a handler, makes prctl/getppid
        // system calls and touches atomics.
        let child = unsafe { os::fork_child(divert_getppid) }.expect("fork");
        let exit = child.wait().expect("wait");
        mantle_testsupport::require(
            "Syscall User Dispatch (Linux 5.11)",
            exit != Exit::Code(11),
            "to test the SIGSYS it raises",
        );
        assert_eq!(exit, Exit::Code(0));
    }
}

//! Exceptions through instrumented frames (issue 35): the unwinder cannot
//! step through a trampoline (the caller's return address X lives in the
//! thread's trampoline stack, not on the machine stack: no CFI can say
//! where) nor through a return-frame slot (the runtime's text has no FDE
//! for it). So the runtime stands between the C++ runtime and the
//! unwinder:
//!
//! * `_Unwind_RaiseException`, `_Unwind_Resume`,
//!   `_Unwind_Resume_or_Rethrow` and `_Unwind_ForcedUnwind` (defined here,
//!   so they take precedence over libgcc_s's for the program and its
//!   libraries, and forwarded to the next definition, `dlsym(RTLD_NEXT)`)
//!   first *uninstall* the thread's instrumented frames: each open
//!   trampoline's stack word (its body's return address R2) gets the
//!   caller's X back, each return frame's slot address its original. The
//!   unwinder then walks the stack the uninstrumented program would have:
//!   the function's own FDE and LSDA hold (its code is where it was);
//! * the personality routines (`__gxx_personality_v0`,
//!   `__gcc_personality_v0`), forwarded likewise, see where the unwinder
//!   stops: when one answers `_URC_INSTALL_CONTEXT` (a cleanup or a
//!   handler), every instrumented frame whose return address lies below
//!   the context's CFA (the landing pad frame's stack pointer) is gone:
//!   it is closed now, innermost first, with its leave hook (the trace
//!   stays nested), and the frames that survive are *reinstalled* (R2 and
//!   slot addresses back), so their exits run as usual. A cleanup ends in
//!   `_Unwind_Resume`, which uninstalls again.
//!
//! The four entry points are `extern "C-unwind"`: the exception passes
//! through their frames (a plain `extern "C"` frame aborts it).
//!
//! Invariant: outside the unwinder's own run (from one of the entry
//! points above to the landing pad it installs), every open frame's stack
//! word holds its instrumented return address. Not async-signal-safe (nor
//! is the unwinder). Limit: the program must resolve these symbols to the
//! runtime first: linked into the executable (libmantle_instr_rt.a) it
//! does; a rewritten linked file lists libmantle_instr_rt.so first.

// The unwinder's entry points must have its exact names.
#![allow(non_snake_case)]

use crate::{close, user, Frame, THREAD, USER_LEAVE};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `_URC_INSTALL_CONTEXT`.
const INSTALL_CONTEXT: i32 = 7;

/// The next definition of `name` (NUL-terminated) after this object's,
/// cached in `at`. Aborts when there is none: an exception cannot go on.
fn next(at: &AtomicUsize, name: &[u8]) -> usize {
    let f = at.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    // SAFETY: dlsym with a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        crate::lost(b"libmantle-instr: no unwinder behind the runtime's (dlsym RTLD_NEXT)\n");
    }
    at.store(f, Ordering::Relaxed);
    f
}

/// The thread's trampoline stack (null before its first trampoline).
fn xs() -> *mut usize {
    let p: *mut usize;
    // SAFETY: reads the thread's TLS pointer, as the trampolines do.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + __mantle_instr_xs@GOTTPOFF]",
            "mov {p}, qword ptr fs:[{p}]",
            p = out(reg) p,
            options(nostack, readonly, preserves_flags)
        );
    }
    p
}

/// The body return address (R2) of the calling thread's top trampoline
/// entry: the one an inline trampoline just pushed (0 if none).
pub(crate) fn xs_top_r2() -> usize {
    let x = xs();
    if x.is_null() {
        return 0;
    }
    // SAFETY: the thread's own stack: its header and its first `len`
    // entries are mapped.
    unsafe {
        let len = *x;
        if len == 0 {
            return 0;
        }
        *entry(x, len - 1).add(2)
    }
}

/// Entry `i` of the trampoline stack `x`: `[sp, X, R2, id]`.
///
/// # Safety
/// `x` is the thread's stack and `i` below its length.
unsafe fn entry(x: *mut usize, i: usize) -> *mut usize {
    // SAFETY: by the caller.
    unsafe { x.add(2 + i * 4) }
}

fn is_slot(a: usize) -> bool {
    let base = crate::slots_base();
    a >= base && a < base + crate::SLOTS * crate::SLOT_SIZE
}

/// Writes each open frame's original return address back to its stack
/// word (`to_orig`), or its instrumented one (`!to_orig`, frames at or
/// above `keep_from` only: the others are gone). A word that does not
/// hold the other value is left alone (a frame the stack no longer has).
fn swap_all(to_orig: bool, keep_from: usize) {
    let x = xs();
    if !x.is_null() {
        // SAFETY: the thread's own stack; entries below len are complete
        // or claimed (sp = MAX), and their words are on this thread's
        // machine stack, at or above the current frame.
        unsafe {
            for i in 0..*x {
                let e = entry(x, i);
                let (sp, orig, fake) = (*e, *e.add(1), *e.add(2));
                if sp == usize::MAX || sp < keep_from {
                    continue;
                }
                let w = sp as *mut usize;
                let (from, to) = if to_orig { (fake, orig) } else { (orig, fake) };
                if *w == from {
                    *w = to;
                }
            }
        }
    }
    let _ = THREAD.try_with(|cell| {
        // SAFETY: the thread's own data, outside any hook.
        let th = unsafe { &*cell.get() };
        for f in th.frames.iter().filter(|f: &&Frame| is_slot(f.fake)) {
            if f.sp < keep_from {
                continue;
            }
            let w = f.sp as *mut usize;
            let (from, to) = if to_orig {
                (f.fake, f.orig)
            } else {
                (f.orig, f.fake)
            };
            // SAFETY: the frame's return address word, on this thread's
            // stack above the unwinder's frames.
            unsafe {
                if *w == from {
                    *w = to;
                }
            }
        }
    });
}

/// Closes, innermost first, the frames whose return address word lies
/// below `floor` (unwound), then reinstalls the others.
fn land(floor: usize) {
    let x = xs();
    if !x.is_null() {
        // SAFETY: as in swap_all; popping as the trampolines' exit does
        // (the claim is left behind, the length shrinks after).
        unsafe {
            while *x > 0 {
                let e = entry(x, *x - 1);
                let sp = *e;
                if sp == usize::MAX || sp >= floor {
                    break;
                }
                let id = *e.add(3) as u32;
                *e = usize::MAX;
                *x -= 1;
                if let Some(h) = user(&USER_LEAVE) {
                    h(id);
                }
            }
        }
    }
    let _ = THREAD.try_with(|cell| {
        // SAFETY: the thread's own data, outside any hook.
        let th = unsafe { &mut *cell.get() };
        let t = crate::stamp(&USER_LEAVE);
        while th.frames.last().is_some_and(|f| f.sp < floor) {
            close(th, t);
        }
    });
    swap_all(false, floor);
}

static RAISE: AtomicUsize = AtomicUsize::new(0);
static RESUME: AtomicUsize = AtomicUsize::new(0);
static RETHROW: AtomicUsize = AtomicUsize::new(0);
static FORCED: AtomicUsize = AtomicUsize::new(0);
static GXX: AtomicUsize = AtomicUsize::new(0);
static GCC: AtomicUsize = AtomicUsize::new(0);
static GET_CFA: AtomicUsize = AtomicUsize::new(0);

type Raise = unsafe extern "C-unwind" fn(*mut c_void) -> i32;
type Forced = unsafe extern "C-unwind" fn(*mut c_void, *mut c_void, *mut c_void) -> i32;
type Personality = unsafe extern "C" fn(i32, i32, u64, *mut c_void, *mut c_void) -> i32;

/// Raises with the frames uninstalled; reinstalls them if it returns (no
/// handler: the caller terminates, or reports the code).
unsafe fn raise_with(at: &AtomicUsize, name: &[u8], exc: *mut c_void) -> i32 {
    let f = next(at, name);
    swap_all(true, 0);
    // SAFETY: the next definition of the same function.
    let rc = unsafe { std::mem::transmute::<usize, Raise>(f)(exc) };
    swap_all(false, 0);
    rc
}

/// The unwinder's entry point, with the instrumented frames uninstalled.
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_RaiseException(exc: *mut c_void) -> i32 {
    // SAFETY: forwarded as called.
    unsafe { raise_with(&RAISE, b"_Unwind_RaiseException\0", exc) }
}

/// As [`_Unwind_RaiseException`] (a cleanup's end: it does not return).
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_Resume(exc: *mut c_void) {
    // SAFETY: forwarded as called.
    unsafe { raise_with(&RESUME, b"_Unwind_Resume\0", exc) };
}

/// As [`_Unwind_RaiseException`] (`throw;`).
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_Resume_or_Rethrow(exc: *mut c_void) -> i32 {
    // SAFETY: forwarded as called.
    unsafe { raise_with(&RETHROW, b"_Unwind_Resume_or_Rethrow\0", exc) }
}

/// As [`_Unwind_RaiseException`] (thread cancellation and exit).
#[no_mangle]
pub unsafe extern "C-unwind" fn _Unwind_ForcedUnwind(
    exc: *mut c_void,
    stop: *mut c_void,
    arg: *mut c_void,
) -> i32 {
    let f = next(&FORCED, b"_Unwind_ForcedUnwind\0");
    swap_all(true, 0);
    // SAFETY: the next definition of the same function.
    let rc = unsafe { std::mem::transmute::<usize, Forced>(f)(exc, stop, arg) };
    swap_all(false, 0);
    rc
}

/// Calls the next personality routine; where it installs a landing pad,
/// closes the unwound frames and reinstalls the rest.
unsafe fn personality(
    at: &AtomicUsize,
    name: &[u8],
    args: (i32, i32, u64, *mut c_void, *mut c_void),
) -> i32 {
    let f = next(at, name);
    // SAFETY: the next definition of the same function, with its args.
    let rc = unsafe {
        std::mem::transmute::<usize, Personality>(f)(args.0, args.1, args.2, args.3, args.4)
    };
    if rc == INSTALL_CONTEXT {
        let g = next(&GET_CFA, b"_Unwind_GetCFA\0");
        // SAFETY: _Unwind_GetCFA(context), the context the unwinder gave.
        let cfa = unsafe {
            std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> usize>(g)(args.4)
        };
        // In a personality routine the context's CFA is the one of the
        // frame below the landing pad's (libgcc's phase 2 calls it before
        // stepping the context to the caller): the landing pad's stack
        // pointer at its call. Every return address word below it is
        // unwound (measured: with CFA - 8, the frame just below survived).
        land(cfa);
    }
    rc
}

/// C++'s personality routine, watched (module doc).
#[no_mangle]
pub unsafe extern "C" fn __gxx_personality_v0(
    version: i32,
    actions: i32,
    class: u64,
    exc: *mut c_void,
    ctx: *mut c_void,
) -> i32 {
    // SAFETY: forwarded as called.
    unsafe {
        personality(
            &GXX,
            b"__gxx_personality_v0\0",
            (version, actions, class, exc, ctx),
        )
    }
}

/// C's (`__attribute__((cleanup))` under -fexceptions), watched.
#[no_mangle]
pub unsafe extern "C" fn __gcc_personality_v0(
    version: i32,
    actions: i32,
    class: u64,
    exc: *mut c_void,
    ctx: *mut c_void,
) -> i32 {
    // SAFETY: forwarded as called.
    unsafe {
        personality(
            &GCC,
            b"__gcc_personality_v0\0",
            (version, actions, class, exc, ctx),
        )
    }
}

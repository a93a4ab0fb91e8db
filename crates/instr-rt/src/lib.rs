//! libmantle-instr: the runtime that functions rewritten by `mantle instr`
//! (crate `mantle-instr`) call at entry and exit. Built as a static
//! library, a shared library and an rlib; the C interface is
//! `include/mantle/instr.h`.
//!
//! Mechanism (LOPI, Kågström Paper IV, §5.3, on x86-64):
//! * a rewritten function starts with `call stub; jmp over; .long id`. The
//!   stub is shared by every site with the same overwritten instructions:
//!   it calls [`__mantle_instr_enter`], parks its return address in a
//!   stack slot, runs the relocated instructions and returns to the site
//!   through that slot, touching no register, so calls and returns stay
//!   paired for the return predictor;
//! * `__mantle_instr_enter` saves every argument register (rax for varargs,
//!   r10 for the static chain, xmm0-7), reads the 32-bit id behind the site,
//!   and, in Rust, pushes a *return frame* on a per-thread stack and
//!   overwrites the function's return address with the address of the code
//!   slot of that depth: the exit is instrumented lazily, without patching
//!   the function's `ret`s (§5.3, Figures 5.4-5.6);
//! * the code slots are `call __mantle_instr_leave_asm` stubs in this
//!   library's text (never data made executable: no RWX pages), one per
//!   depth; the frame's data (id, original return address, time) is in
//!   thread-local memory, so code and data never share a cache line
//!   (the paper padded its frames for the same reason);
//! * the slot's depth says which frame returned: frames above it were
//!   skipped by `longjmp` and are closed then; a frame whose return
//!   address lies below the current stack pointer at an entry is dead for
//!   the same reason and closed. A tail call (`jmp` to an instrumented
//!   function) sees its return address already pointing at a slot: it
//!   gets a frame of its own and the two leaves run in order.
//!
//! * functions whose `ret`s the rewriter patched (balanced exits) enter
//!   through [`__mantle_instr_enter_b`] (no return address rewrite) and
//!   leave through [`__mantle_instr_leave_b`], called by the exit stub just
//!   before the `ret`: calls and returns stay paired. Their frames live on
//!   the same per-thread stack, matched by the stack address of the return
//!   address.
//!
//! The hooks: by default the built-in tracer (per-function calls,
//! inclusive and exclusive TSC time, an optional Chrome trace), or the
//! user's `enter(id)`/`leave(id)` set with `mantle_instr_set_hooks`.
//! Output is written at exit only when asked for (MANTLE_INSTR_OUT,
//! MANTLE_INSTR_TRACE), so an instrumented program prints what it printed.
//!
//! Invariants: the hooks never unwind (extern "C": a panic aborts); a
//! thread whose thread-local data is gone (late destructors) runs its
//! instrumented functions uninstrumented, never with a rewritten return
//! address it could not restore. Limits: the return address rewrite
//! defeats the CPU's return predictor (the paper's own finding, §5.5);
//! C++ exceptions cannot unwind through a slot (the planner refuses
//! return-frame functions of objects that use them); a CET shadow stack would reject the
//! rewritten return (the planner refuses objects marked for it).
//!
//! Lock order: one global mutex ([`GLOBAL`]) taken at thread exit and at
//! process exit; the enter/leave path takes no lock.

#![allow(clippy::missing_safety_doc)]

mod tracer;

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use tracer::{write_outputs, GLOBAL};

/// Number of return-frame code slots; frames deeper than `SLOTS - 1`
/// share the last slot and are closed in stack order.
pub const SLOTS: usize = 16384;
/// Bytes per slot (a 5-byte call padded with int3).
pub const SLOT_SIZE: usize = 8;

/// A user hook: called with the function id at entry or exit.
pub type Hook = extern "C" fn(u32);

static USER_ENTER: AtomicUsize = AtomicUsize::new(0);
static USER_LEAVE: AtomicUsize = AtomicUsize::new(0);

/// Replaces the built-in tracer with the user's hooks (NULL for none).
/// Thread-safe; takes effect for entries after the call.
#[no_mangle]
pub extern "C" fn mantle_instr_set_hooks(enter: Option<Hook>, leave: Option<Hook>) {
    // Leave first, so no entry runs the user's enter without its leave.
    USER_LEAVE.store(leave.map_or(0, |f| f as usize), Ordering::Release);
    USER_ENTER.store(enter.map_or(0, |f| f as usize), Ordering::Release);
}

/// The body of every entry and exit routine: saves every caller-saved
/// register (GCC's -fipa-ra lets a caller keep values in registers a
/// same-unit callee does not touch: found by the fixtures, a value in r10
/// across a call; xmm8-15 for the same reason), aligns the stack itself
/// (GCC's -fipa-stack-alignment calls same-unit functions with rsp = 0
/// mod 16: found by the threads fixture), runs `$mid` with rbp = the
/// frame ([rbp + 8] the routine's return address, [rbp + 16] the word
/// above it), restores and returns. One copy, so the six routines cannot
/// drift apart.
macro_rules! saving_all {
    ($($mid:literal),* ; $($operands:tt)*) => {
        core::arch::naked_asm!(
            "push rbp",
            "mov rbp, rsp",
            "and rsp, -16",
            "push rax",
            "push rcx",
            "push rdx",
            "push rsi",
            "push rdi",
            "push r8",
            "push r9",
            "push r10",
            "push r11",
            "sub rsp, 264",
            "movaps [rsp + 0], xmm0",
            "movaps [rsp + 16], xmm1",
            "movaps [rsp + 32], xmm2",
            "movaps [rsp + 48], xmm3",
            "movaps [rsp + 64], xmm4",
            "movaps [rsp + 80], xmm5",
            "movaps [rsp + 96], xmm6",
            "movaps [rsp + 112], xmm7",
            "movaps [rsp + 128], xmm8",
            "movaps [rsp + 144], xmm9",
            "movaps [rsp + 160], xmm10",
            "movaps [rsp + 176], xmm11",
            "movaps [rsp + 192], xmm12",
            "movaps [rsp + 208], xmm13",
            "movaps [rsp + 224], xmm14",
            "movaps [rsp + 240], xmm15",
            $($mid,)*
            "movaps xmm0, [rsp + 0]",
            "movaps xmm1, [rsp + 16]",
            "movaps xmm2, [rsp + 32]",
            "movaps xmm3, [rsp + 48]",
            "movaps xmm4, [rsp + 64]",
            "movaps xmm5, [rsp + 80]",
            "movaps xmm6, [rsp + 96]",
            "movaps xmm7, [rsp + 112]",
            "movaps xmm8, [rsp + 128]",
            "movaps xmm9, [rsp + 144]",
            "movaps xmm10, [rsp + 160]",
            "movaps xmm11, [rsp + 176]",
            "movaps xmm12, [rsp + 192]",
            "movaps xmm13, [rsp + 208]",
            "movaps xmm14, [rsp + 224]",
            "movaps xmm15, [rsp + 240]",
            "add rsp, 264",
            "pop r11",
            "pop r10",
            "pop r9",
            "pop r8",
            "pop rdi",
            "pop rsi",
            "pop rdx",
            "pop rcx",
            "pop rax",
            "mov rsp, rbp",
            "pop rbp",
            "ret",
            $($operands)*
        )
    };
}

/// The entry path, called by every stub. Above its return address are the
/// site's (pointing at the site's 2-byte `jmp` over the 32-bit id) and
/// the function's.
///
/// Every caller-saved register is kept ([`saving_all`]): [rbp + 8] is the
/// stub's return address, [rbp + 16] the site's, [rbp + 24] the
/// function's.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_enter() {
    saving_all!(
        "mov rax, [rbp + 16]",
        "mov edi, dword ptr [rax + 2]",
        "lea rsi, [rbp + 24]",
        "call {enter}";
        enter = sym enter_c
    )
}

/// The entry path of balanced functions (their `ret`s are patched): the
/// same as [`__mantle_instr_enter`], but the return address stays.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_enter_b() {
    saving_all!(
        "mov rax, [rbp + 16]",
        "mov edi, dword ptr [rax + 2]",
        "lea rsi, [rbp + 24]",
        "call {enter}";
        enter = sym enter_b_c
    )
}

/// Bytes from a trampoline's first return address (R1, the `jmp short`
/// over the id) to the return address its `call body` pushes (R2):
/// `jmp short` 2, id 4, `lea rsp, [rsp + 8]` 5, `call body` 5. The
/// rewriter lays trampolines out so (mantle-instr's rewrite.rs asserts the
/// same number).
pub const TRAMP_RET_OFFSET: usize = 16;

/// The entry of a call-through trampoline (the default exit design):
///
/// ```text
/// tramp:  call __mantle_instr_enter_t   ; saves the caller's return address X
///         jmp  short body_call ; .long id
///         lea  rsp, [rsp + 8]           ; drop X (kept in the thread's frame)
///         call body                     ; the function runs with its own
///                                       ; stack layout, returning here (R2)
///         lea  rsp, [rsp - 8]
///         call __mantle_instr_leave_t   ; puts X back at [rsp]
///         ret                           ; to X
/// ```
///
/// Every `call` has its `ret`, so the return predictor stays right (the
/// caller's own `call` pairs with the trampoline's final `ret`), and the
/// function's stack arguments are where they were (no shift by 8). Here
/// [rbp + 8] is R1 (the id is at R1 + 2) and [rbp + 16] holds X.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_enter_t() {
    saving_all!(
        "mov rax, [rbp + 8]",
        "mov edi, dword ptr [rax + 2]",
        "lea rsi, [rbp + 16]",
        "lea rdx, [rax + {off}]",
        "call {enter}";
        off = const TRAMP_RET_OFFSET,
        enter = sym enter_t_c
    )
}

/// The exit of a call-through trampoline: [rbp + 16] is the stack word
/// where the function's return address was; the caller's is written back
/// there for the trampoline's `ret`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_leave_t() {
    saving_all!(
        "lea rdi, [rbp + 16]",
        "call {leave}",
        "mov [rbp + 16], rax";
        leave = sym leave_t_c
    )
}

/// The return-frame code slots: slot `d` is the return address given to
/// the function entered at depth `d`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_slots() {
    core::arch::naked_asm!(
        ".rept 16384",
        "call {leave}",
        "int3",
        "int3",
        "int3",
        ".endr",
        leave = sym leave_asm,
    )
}

/// Reached from a slot after the function returned: rsp = 0 mod 16 at the
/// function's return, 8 after the slot's call. Saves every caller-saved
/// register (return values, and what -fipa-ra callers keep live), asks
/// Rust for the original return address, puts it where the slot's return
/// address was ([rbp + 8]) and returns there. Aligns the stack itself,
/// like the entry path.
#[unsafe(naked)]
unsafe extern "C" fn leave_asm() {
    saving_all!(
        "mov rdi, [rbp + 8]",
        "call {leave}",
        "mov [rbp + 8], rax";
        leave = sym leave_c
    )
}

/// Called by a balanced function's exit stub just before its `ret`:
/// [rbp + 16] is the function's return address, whose stack address
/// identifies the frame. Keeps every register.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_leave_b() {
    saving_all!(
        "lea rdi, [rbp + 16]",
        "call {leave}";
        leave = sym leave_b_c
    )
}

fn slots_base() -> usize {
    __mantle_instr_slots as unsafe extern "C" fn() as usize
}

/// The code slot of depth `d`: the return address a function entered at
/// that depth is given. Its call returns to 5 bytes further.
fn slot_code(d: usize) -> usize {
    slots_base() + d.min(SLOTS - 1) * SLOT_SIZE
}

/// One open instrumented call.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    pub id: u32,
    /// The function's own return address, restored at its exit.
    pub orig: usize,
    /// Where that return address lives on the stack.
    pub sp: usize,
    /// The return address the function was given instead (a return-frame
    /// slot or a trampoline's), so a tail call from it is recognised; 0
    /// when it kept its own (patched exits, which never jump out).
    pub fake: usize,
    /// TSC at entry; 0 when a user hook ran instead of the tracer (the
    /// TSC costs 11 ns a read on these VMs: bench/instr/RESULTS.md).
    pub t0: u64,
    /// TSC ticks spent in instrumented callees (exclusive time).
    pub child: u64,
}

pub(crate) struct Thread {
    pub frames: Vec<Frame>,
    pub trace: tracer::ThreadTrace,
}

thread_local! {
    static THREAD: UnsafeCell<Thread> = UnsafeCell::new(Thread {
        frames: Vec::with_capacity(64),
        trace: tracer::ThreadTrace::new(),
    });
}

/// Return addresses trampolines keep for a thread whose [`THREAD`] is gone
/// (functions run by TLS destructors or at exit after them): a trampoline
/// has already taken the caller's return address off the stack and must
/// get it back. No destructor, so it is always there.
const SPARE_LEN: usize = 256;
struct Spare {
    len: usize,
    /// (stack address, caller's return address).
    frames: [(usize, usize); SPARE_LEN],
}

thread_local! {
    static SPARE: UnsafeCell<Spare> = const {
        UnsafeCell::new(Spare { len: 0, frames: [(0, 0); SPARE_LEN] })
    };
}

#[inline]
fn now() -> u64 {
    // SAFETY: rdtsc has no memory effects; x86-64 always has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The time for an event whose hook is `hook`: the tracer needs the TSC,
/// a user hook does not (and a read costs 11 ns here).
#[inline]
fn stamp(hook: &AtomicUsize) -> u64 {
    if hook.load(Ordering::Relaxed) == 0 {
        now()
    } else {
        0
    }
}

fn user(hook: &AtomicUsize) -> Option<Hook> {
    match hook.load(Ordering::Acquire) {
        0 => None,
        // SAFETY: only mantle_instr_set_hooks stores non-zero values, and
        // they are `Hook` function pointers.
        f => Some(unsafe { std::mem::transmute::<usize, Hook>(f) }),
    }
}

/// Closes the top frame at time `t` (its function returned, or was
/// skipped by longjmp).
fn close(th: &mut Thread, t: u64) -> Option<Frame> {
    let f = th.frames.pop()?;
    match user(&USER_LEAVE) {
        Some(h) => h(f.id),
        None => {
            let parent = th.frames.last_mut();
            th.trace.leave(&f, t, parent);
        }
    }
    Some(f)
}

/// How an entry gives the function its exit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// LOPI's return frame: the return address becomes a code slot.
    ReturnFrame,
    /// The function's `ret`s were patched: nothing to change.
    Patched,
    /// A call-through trampoline whose body returns to this address.
    Trampoline(usize),
}

extern "C" fn enter_c(id: u32, slot: *mut usize) {
    enter_common(id, slot, Entry::ReturnFrame);
}

/// Pushes the frame of a balanced function (its return address stays).
extern "C" fn enter_b_c(id: u32, slot: *mut usize) {
    enter_common(id, slot, Entry::Patched);
}

/// Pushes the frame of a trampoline's function: `slot` holds the caller's
/// return address, which the trampoline drops from the stack next.
extern "C" fn enter_t_c(id: u32, slot: *mut usize, body_ret: usize) {
    if enter_common(id, slot, Entry::Trampoline(body_ret)) {
        return;
    }
    // SAFETY: as in enter_common; SPARE has no destructor, so `with`
    // cannot fail.
    let kept = SPARE.with(|c| {
        let sp = unsafe { &mut *c.get() };
        // Entries below this one were skipped by longjmp.
        while sp.len > 0 && sp.frames[sp.len - 1].0 < slot as usize {
            sp.len -= 1;
        }
        let ok = sp.len < SPARE_LEN;
        if ok {
            sp.frames[sp.len] = (slot as usize, unsafe { *slot });
            sp.len += 1;
        }
        ok
    });
    if !kept {
        lost(b"libmantle-instr: too many instrumented calls after thread exit\n");
    }
}

/// Pushes a frame; false if the thread's data is gone (nothing pushed).
fn enter_common(id: u32, slot: *mut usize, how: Entry) -> bool {
    tracer::init();
    THREAD
        .try_with(|cell| {
            // SAFETY: the thread's own data; the hooks are not reentrant
            // (the runtime calls no instrumented code), so no other
            // reference lives.
            let th = unsafe { &mut *cell.get() };
            let t = stamp(&USER_ENTER);
            let sp = slot as usize;
            // SAFETY: `slot` is the function's return address on its
            // stack, computed by the entry routine.
            let ret = unsafe { *slot };
            // Frames whose return address lies below this one are dead:
            // the stack was unwound past them (longjmp). At the same
            // address the frame is alive only if this is a tail call from
            // it (its return address is the one it was given).
            while let Some(top) = th.frames.last() {
                if top.sp < sp || (top.sp == sp && (top.fake == 0 || ret != top.fake)) {
                    close(th, stamp(&USER_LEAVE));
                } else {
                    break;
                }
            }
            let fake = match how {
                Entry::ReturnFrame => slot_code(th.frames.len()),
                Entry::Patched => 0,
                Entry::Trampoline(r) => r,
            };
            th.frames.push(Frame {
                id,
                orig: ret,
                sp,
                fake,
                t0: t,
                child: 0,
            });
            if how == Entry::ReturnFrame {
                // SAFETY: as above.
                unsafe { *slot = fake };
            }
            match user(&USER_ENTER) {
                Some(h) => h(id),
                None => th.trace.enter(id, t),
            }
        })
        .is_ok()
}

/// Closes the frames above the one whose return address lives at `sp`
/// (skipped by longjmp) and that one, if it is there: its return address.
fn close_at(sp: usize) -> Option<usize> {
    THREAD
        .try_with(|cell| {
            // SAFETY: see enter_common.
            let th = unsafe { &mut *cell.get() };
            let t = stamp(&USER_LEAVE);
            while th.frames.last().is_some_and(|f| f.sp < sp) {
                close(th, t);
            }
            if th.frames.last().is_some_and(|f| f.sp == sp) {
                close(th, t).map(|f| f.orig)
            } else {
                None
            }
        })
        .ok()
        .flatten()
}

/// Closes the frame of a balanced function returning from `sp` (the
/// stack address of its return address), and dead frames above it.
extern "C" fn leave_b_c(sp: usize) {
    close_at(sp);
}

/// The caller's return address for the trampoline whose function's return
/// address lived at `sp`.
extern "C" fn leave_t_c(sp: usize) -> usize {
    // SAFETY: SPARE is this thread's, without destructor; see enter_t_c.
    let spare = SPARE.with(|c| {
        let s = unsafe { &mut *c.get() };
        while s.len > 0 && s.frames[s.len - 1].0 < sp {
            s.len -= 1;
        }
        (s.len > 0 && s.frames[s.len - 1].0 == sp).then(|| {
            s.len -= 1;
            s.frames[s.len].1
        })
    });
    match spare.or_else(|| close_at(sp)) {
        Some(orig) => orig,
        None => lost(b"libmantle-instr: trampoline frame lost\n"),
    }
}

extern "C" fn leave_c(ret: usize) -> usize {
    let depth = (ret - 5 - slots_base()) / SLOT_SIZE;
    let r = THREAD.try_with(|cell| {
        // SAFETY: see enter_common.
        let th = unsafe { &mut *cell.get() };
        let t = stamp(&USER_LEAVE);
        if depth < SLOTS - 1 {
            // Frames above `depth` were skipped by longjmp.
            while th.frames.len() > depth + 1 {
                close(th, t);
            }
        }
        close(th, t).map(|f| f.orig)
    });
    match r {
        Ok(Some(orig)) => orig,
        _ => lost(b"libmantle-instr: return frame lost\n"),
    }
}

/// A return address cannot be restored: nothing sane is left to do.
fn lost(msg: &[u8]) -> ! {
    // SAFETY: write(2) of a caller's buffer, then abort.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Number of open frames of the calling thread (tests and tools).
#[no_mangle]
pub extern "C" fn mantle_instr_depth() -> u32 {
    THREAD
        .try_with(|c| {
            // SAFETY: see enter_c.
            unsafe { &*c.get() }.frames.len() as u32
        })
        .unwrap_or(0)
}

/// Writes the outputs now (also done at exit).
#[no_mangle]
pub extern "C" fn mantle_instr_flush() {
    write_outputs();
}

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

/// The entry path, called by every stub. Above its return address are the
/// site's (pointing at the site's 2-byte `jmp` over the 32-bit id) and
/// the function's.
///
/// Every caller-saved register is kept, xmm0-15 included: GCC's -fipa-ra
/// lets a caller keep values in registers a same-unit callee does not
/// touch (found by the fixtures: a value in r10 across a call).
/// The stack is aligned here, not assumed: GCC's -fipa-stack-alignment
/// calls same-unit functions that need no alignment with rsp = 0 mod 16
/// (found by the threads fixture). rbp keeps the frame: [rbp + 8] is the
/// stub's return address, [rbp + 16] the function's.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_enter() {
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
        "mov rax, [rbp + 16]",
        "mov edi, dword ptr [rax + 2]",
        "lea rsi, [rbp + 24]",
        "call {enter}",
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
        enter = sym enter_c,
    )
}

/// The entry path of balanced functions (their `ret`s are patched): the
/// same as [`__mantle_instr_enter`], but the return address stays.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_enter_b() {
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
        "mov rax, [rbp + 16]",
        "mov edi, dword ptr [rax + 2]",
        "lea rsi, [rbp + 24]",
        "call {enter}",
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
        enter = sym enter_b_c,
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
        "mov rdi, [rbp + 8]",
        "call {leave}",
        "mov [rbp + 8], rax",
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
        leave = sym leave_c,
    )
}

/// Called by a balanced function's exit stub just before its `ret`:
/// [rbp + 16] is the function's return address, whose stack address
/// identifies the frame. Keeps every register.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_leave_b() {
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
        "lea rdi, [rbp + 16]",
        "call {leave}",
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
        leave = sym leave_b_c,
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

#[inline]
fn now() -> u64 {
    // SAFETY: rdtsc has no memory effects; x86-64 always has it.
    unsafe { core::arch::x86_64::_rdtsc() }
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

extern "C" fn enter_c(id: u32, slot: *mut usize) {
    enter_common(id, slot, true);
}

fn enter_common(id: u32, slot: *mut usize, return_frame: bool) {
    tracer::init();
    let _ = THREAD.try_with(|cell| {
        // SAFETY: the thread's own data; the hooks are not reentrant (the
        // runtime calls no instrumented code), so no other reference lives.
        let th = unsafe { &mut *cell.get() };
        let t = now();
        let sp = slot as usize;
        // SAFETY: `slot` is the function's return address on its stack,
        // computed by __mantle_instr_enter.
        let ret = unsafe { *slot };
        // Frames whose return address lies below this one are dead: the
        // stack was unwound past them (longjmp). At the same address the
        // frame is alive only if this is a tail call from it.
        while let Some(top) = th.frames.last() {
            let d = th.frames.len() - 1;
            if top.sp < sp || (top.sp == sp && ret != slot_code(d)) {
                close(th, t);
            } else {
                break;
            }
        }
        let d = th.frames.len();
        th.frames.push(Frame {
            id,
            orig: ret,
            sp,
            t0: t,
            child: 0,
        });
        if return_frame {
            // SAFETY: as above.
            unsafe { *slot = slot_code(d) };
        }
        match user(&USER_ENTER) {
            Some(h) => h(id),
            None => th.trace.enter(id, t),
        }
    });
}

/// Pushes the frame of a balanced function (its return address stays).
extern "C" fn enter_b_c(id: u32, slot: *mut usize) {
    enter_common(id, slot, false);
}

/// Closes the frame of a balanced function returning from `sp` (the
/// stack address of its return address), and dead frames above it.
extern "C" fn leave_b_c(sp: usize) {
    let _ = THREAD.try_with(|cell| {
        // SAFETY: see enter_c.
        let th = unsafe { &mut *cell.get() };
        let t = now();
        while th.frames.last().is_some_and(|f| f.sp < sp) {
            close(th, t);
        }
        if th.frames.last().is_some_and(|f| f.sp == sp) {
            close(th, t);
        }
    });
}

extern "C" fn leave_c(ret: usize) -> usize {
    let depth = (ret - 5 - slots_base()) / SLOT_SIZE;
    let r = THREAD.try_with(|cell| {
        // SAFETY: see enter_c.
        let th = unsafe { &mut *cell.get() };
        let t = now();
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
        _ => {
            // A slot was reached without its frame: the return address
            // cannot be restored. Nothing sane is left to do.
            const MSG: &[u8] = b"libmantle-instr: return frame lost\n";
            // SAFETY: write(2) of a static buffer, then abort.
            unsafe {
                libc::write(2, MSG.as_ptr().cast(), MSG.len());
                libc::abort()
            }
        }
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

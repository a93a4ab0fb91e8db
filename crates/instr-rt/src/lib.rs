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
//! * call-through trampolines (the default exit): [`__mantle_instr_tramp_enter`]
//!   takes the caller's return address off the stack and keeps it on a
//!   per-thread stack (allocated at the thread's first trampoline, reached
//!   through an initial-exec TLS pointer, `__mantle_instr_xs`), the
//!   trampoline calls the function's body, and [`__mantle_instr_tramp_leave`]
//!   puts the address back for the trampoline's `ret`: every call has its
//!   ret. Both are assembly: fast hooks (`mantle_instr_set_fast_hooks`,
//!   hooks that save what they use) are called with nothing saved,
//!   ordinary hooks with the general registers and the vector registers
//!   the rewriter found live saved (two counts in the trampoline's bytes,
//!   mantle-instr's `vregs`), the tracer through Rust frames kept beside
//!   the TLS stack. Trampolines in rewritten objects carry the same fast
//!   paths inline and call [`__mantle_instr_enter_fn`] /
//!   [`__mantle_instr_leave_fn`] for the hook (always a valid routine,
//!   repointed by `update_hook_fns`); these routines are their slow path.
//!   With no hook and no tracer ([`__mantle_instr_on`] zero) they push no
//!   frame at all and jump to the function's body;
//!
//! * functions whose `ret`s the rewriter patched (balanced exits) enter
//!   through [`__mantle_instr_enter_b`] (no return address rewrite) and
//!   leave through [`__mantle_instr_leave_b`], called by the exit stub just
//!   before the `ret`: calls and returns stay paired. Their frames live on
//!   the same per-thread stack, matched by the stack address of the return
//!   address.
//!
//! The hooks: the user's `enter(id)`/`leave(id)` set with
//! `mantle_instr_set_hooks`, or else the built-in tracer (per-function
//! calls, inclusive and exclusive TSC time, an optional Chrome trace) when
//! an output is asked for, or else nothing (`TRACER`).
//! Output is written at exit only when asked for (MANTLE_INSTR_OUT,
//! MANTLE_INSTR_TRACE), so an instrumented program prints what it printed.
//!
//! Invariants: the hooks never unwind (extern "C": a panic aborts); a
//! thread whose Rust thread-local data is gone (late destructors) runs its
//! return-frame and patched-ret functions uninstrumented, never with a
//! rewritten return address it could not restore; a trampoline run after
//! its thread's stack was freed (a late destructor) allocates a new one. A trampoline whose
//! frame is missing at exit (a corrupted stack) aborts with a message
//! rather than return anywhere. An entry of the trampolines' stack is
//! claimed (sp = MAX) before the stack's length counts it, and left
//! claimed when popped, so a signal handler running instrumented code at
//! any instruction, or at two in a row, sees every entry of the code it
//! interrupted as live (the push in [`__mantle_instr_tramp_enter`] says
//! why both halves are needed). The runtime makes its few system calls
//! (write, abort, sigaltstack, the signal mask) through libc itself
//! rather than through mantle-sys: it is linked into the guest program,
//! which should not carry mantle's syscall layer. Limits: the return address rewrite
//! defeats the CPU's return predictor (the paper's own finding, §5.5);
//! C++ exceptions unwind through trampolines because the runtime
//! uninstalls them for the unwinder and closes what it unwinds
//! ([`unwind`]); the planner still refuses return frames in objects that
//! use exceptions; a CET
//! shadow stack would reject a return frame's ret (the rewriter clears
//! the property when it uses one); trampolines nest 4,194,304 deep per
//! thread ([`XS_LEN`], address space reserved and made usable as needed).
//!
//! The TSC is read only for the tracer: a read costs 11-20 ns on these
//! VMs (bench/instr/HISTORY.md), more than a fast hook's whole call.
//!
//! Lock order: one global mutex ([`GLOBAL`]) taken at thread exit and at
//! process exit; the enter/leave path takes no lock.

#![allow(clippy::missing_safety_doc)]

mod tracer;
pub mod unwind;

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
/// Hooks that save every register they use themselves
/// (`mantle_instr_set_fast_hooks`); read by the trampolines' assembly.
static FAST_ENTER: AtomicUsize = AtomicUsize::new(0);
static FAST_LEAVE: AtomicUsize = AtomicUsize::new(0);
/// Whether the built-in tracer runs when no hook is set: [`TRACER_UNKNOWN`]
/// until the first entry reads the environment, then [`TRACER_OFF`] (no
/// output asked for: MANTLE_INSTR_OUT and MANTLE_INSTR_TRACE unset, so
/// nothing would ever be written) or [`TRACER_ON`]. Read by the
/// trampolines' assembly: off, an entry and exit with no hook push nothing
/// and return at once (issue 35: the tracer ran for nothing, 26x on fib).
pub(crate) static TRACER: AtomicUsize = AtomicUsize::new(TRACER_UNKNOWN);
pub(crate) const TRACER_UNKNOWN: usize = 0;
pub(crate) const TRACER_OFF: usize = 1;
pub(crate) const TRACER_ON: usize = 2;

fn tracer_on() -> bool {
    TRACER.load(Ordering::Relaxed) == TRACER_ON
}

/// Replaces the built-in tracer with the user's hooks (NULL for none).
/// Thread-safe; takes effect for entries after the call.
#[no_mangle]
pub extern "C" fn mantle_instr_set_hooks(enter: Option<Hook>, leave: Option<Hook>) {
    FAST_ENTER.store(0, Ordering::Release);
    FAST_LEAVE.store(0, Ordering::Release);
    // Leave first, so no entry runs the user's enter without its leave.
    USER_LEAVE.store(leave.map_or(0, |f| f as usize), Ordering::Release);
    USER_ENTER.store(enter.map_or(0, |f| f as usize), Ordering::Release);
    update_hook_fns();
}

/// The caller-saved general registers but rax (eight: rsp stays 16-byte
/// aligned across them), pushed and popped.
macro_rules! push_gprs {
    () => {
        "push rcx\n push rdx\n push rsi\n push rdi\n push r8\n push r9\n push r10\n push r11"
    };
}
macro_rules! pop_gprs {
    () => {
        "pop r11\n pop r10\n pop r9\n pop r8\n pop rdi\n pop rsi\n pop rdx\n pop rcx"
    };
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
            push_gprs!(),
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
            pop_gprs!(),
            "pop rax",
            "mov rsp, rbp",
            "pop rbp",
            "ret",
            $($operands)*
        )
    };
}

/// Like [`mantle_instr_set_hooks`], for hooks that keep every register
/// but the flags (GCC and clang: `__attribute__((no_caller_saved_registers))`,
/// compiled with `-mgeneral-regs-only`, which the attribute requires for
/// SSE state): trampolines then call them without saving registers first
/// (bench/instr/RESULTS.md measures the difference). They also serve as
/// the ordinary hooks of the other exit designs.
#[no_mangle]
pub extern "C" fn mantle_instr_set_fast_hooks(enter: Option<Hook>, leave: Option<Hook>) {
    mantle_instr_set_hooks(enter, leave);
    FAST_LEAVE.store(leave.map_or(0, |f| f as usize), Ordering::Release);
    FAST_ENTER.store(enter.map_or(0, |f| f as usize), Ordering::Release);
    update_hook_fns();
}

/// The entry path, called by every stub. Above its return address are the
/// site's (pointing at the site's 2-byte `jmp` over the 32-bit id) and
/// the function's.
///
/// Every caller-saved register is kept (`saving_all!`): [rbp + 8] is the
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
/// `jmp short` 2, id 4, the two vector-register counts 2, `lea rsp,
/// [rsp + 8]` 5, `call body` 5. The
/// rewriter lays trampolines out so (mantle-instr's rewrite.rs asserts the
/// same number).
pub const TRAMP_RET_OFFSET: usize = 18;

/// Entries of the per-thread stack of trampoline frames
/// (`__mantle_instr_xs`) reserved per thread: address space only
/// (`PROT_NONE`, no memory, no commit charge), made usable as the stack
/// grows (`xs_grow`); a trampoline nested deeper aborts. 4,194,304
/// frames: more than a thread's stack holds (a frame takes at least 16
/// bytes of it; 64 MiB), 128 MiB of address space. It was a fixed 4,096.
pub const XS_LEN: usize = 1 << 22;
/// Entries usable at a thread's first trampoline (64 KiB with the header).
const XS_FIRST: usize = 2047;
const XS_ENTRY: usize = 32;

// The per-thread stack of trampoline frames, in assembly so the fast path
// reaches it without calling into Rust (which would make it save every
// register): `len: u64, cap: u64` (entries usable now), then entries of
// `{ sp, caller's return address, body return address (R2), id }`,
// reserved at a thread's first trampoline ([`xs_alloc`]) and grown in
// place ([`xs_grow`]: never moved, so code interrupted by a signal
// handler that grows it keeps valid pointers); the thread pointer to it
// is initial-exec TLS (one `fs:` access; relaxed to local-exec in an
// executable). 8 bytes, so the shared library can still be dlopen'ed
// (the static TLS surplus is small: a 128 KiB block there failed with
// "cannot allocate memory in static TLS block").
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    // Global and exported from the shared library too (export.map):
    // rewritten objects' inline trampolines reach it.
    ".globl __mantle_instr_xs",
    ".type __mantle_instr_xs,@object",
    ".size __mantle_instr_xs, 8",
    "__mantle_instr_xs:",
    ".zero 8",
    ".text",
);

const XS_BYTES: usize = 16 + XS_LEN * XS_ENTRY;

/// The hook routine of the inline trampolines' fast paths (mantle-instr's
/// rewrite.rs emits them into rewritten objects): called as `call [fn]`
/// with `rdi` = `keep << 32 | id` (`keep`: the vector registers xmm0 up
/// to `keep` that an ordinary hook must not lose, mantle-instr's
/// `vregs`), rax, rcx, rdx, rsi and rdi saved by the caller (which may
/// therefore be clobbered), any stack alignment, and the frame's stack
/// word E at [rsp + 48]. Always a valid routine: one that calls the fast
/// hook, the ordinary hook (keeping r8-r11 and the counted vector
/// registers), the tracer's Rust frames, nothing (`ret`), or, before the
/// first entry read the environment, the one that decides
/// (`update_hook_fns` picks). One indirect call instead of the
/// out-of-line routines' loads and branches over four statics.
#[no_mangle]
pub static __mantle_instr_enter_fn: std::sync::atomic::AtomicPtr<()> =
    std::sync::atomic::AtomicPtr::new(inline_decide_enter as *mut ());
/// The same for exits: E (the word the caller's return address went
/// back to) at [rsp + 48].
#[no_mangle]
pub static __mantle_instr_leave_fn: std::sync::atomic::AtomicPtr<()> =
    std::sync::atomic::AtomicPtr::new(inline_decide_leave as *mut ());

/// Nonzero when an inline trampoline's entry has anything to do: a hook,
/// the tracer, or (1 at start) the first entry that reads the environment
/// and decides. Zero, the trampoline jumps straight to the function's body
/// and pushes no frame (mantle-instr's rewrite.rs, `inline_tramp`): no
/// hooks and no output cost a test and two jumps a call. Set by
/// `update_hook_fns` after the routines, so an entry that sees it set
/// finds them. Frames entered while it is zero have no exit; frames open
/// when it goes to zero leave as usual.
#[no_mangle]
pub static __mantle_instr_on: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);

/// Points the inline trampolines' hook routines at what the hooks and
/// the tracer's state say (leave first, as `mantle_instr_set_hooks`),
/// then [`__mantle_instr_on`].
pub(crate) fn update_hook_fns() {
    let tracer = TRACER.load(Ordering::Relaxed);
    type Routine = unsafe extern "C" fn();
    let pick = |fast: &AtomicUsize,
                user: &AtomicUsize,
                f: Routine,
                u: Routine,
                t: Routine,
                d: Routine|
     -> Routine {
        if fast.load(Ordering::Acquire) != 0 {
            f
        } else if user.load(Ordering::Acquire) != 0 {
            u
        } else if tracer == TRACER_ON {
            t
        } else if tracer == TRACER_OFF {
            inline_nothing
        } else {
            d
        }
    };
    let leave = pick(
        &FAST_LEAVE,
        &USER_LEAVE,
        inline_fast_leave,
        inline_user_leave,
        inline_tracer_leave,
        inline_decide_leave,
    );
    __mantle_instr_leave_fn.store(leave as *mut (), Ordering::Release);
    let enter = pick(
        &FAST_ENTER,
        &USER_ENTER,
        inline_fast_enter,
        inline_user_enter,
        inline_tracer_enter,
        inline_decide_enter,
    );
    __mantle_instr_enter_fn.store(enter as *mut (), Ordering::Release);
    let idle = tracer == TRACER_OFF
        && [&FAST_ENTER, &FAST_LEAVE, &USER_ENTER, &USER_LEAVE]
            .iter()
            .all(|h| h.load(Ordering::Acquire) == 0);
    __mantle_instr_on.store(u8::from(!idle), Ordering::Release);
}

/// No hook and no tracer.
#[unsafe(naked)]
unsafe extern "C" fn inline_nothing() {
    core::arch::naked_asm!("ret")
}

/// Calls a fast hook (it keeps every register itself) with the stack
/// aligned; a hook removed meanwhile is skipped. When the stack is
/// aligned already (rsp = 8 mod 16 here, as at any function's entry: the
/// trampoline's five pushes keep an ABI-aligned caller's alignment),
/// jumps to the hook, which returns to the trampoline: no frame of its
/// own (issue 35: this routine was 13% of fib's samples with fast hooks).
/// GCC calls same-unit functions misaligned at times
/// (-fipa-stack-alignment), so the other case stays.
macro_rules! inline_fast {
    ($name:ident, $hook:ident) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "mov rax, qword ptr [rip + {hook}]",
                "test rax, rax",
                "jz 1f",
                "test spl, 8",
                "jz 2f",
                "jmp rax",
                "2:",
                "push rbp",
                "mov rbp, rsp",
                "and rsp, -16",
                "call rax",
                "mov rsp, rbp",
                "pop rbp",
                "1:",
                "ret",
                hook = sym $hook,
            )
        }
    };
}
inline_fast!(inline_fast_enter, FAST_ENTER);
inline_fast!(inline_fast_leave, FAST_LEAVE);

/// Calls an ordinary C hook: keeps r8-r11 (the caller kept rax, rcx,
/// rdx, rsi, rdi) and xmm0 up to the count in rdi's high half, with the
/// stack aligned.
macro_rules! inline_user {
    ($name:ident, $hook:ident) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "and rsp, -16",
                "push r8",
                "push r9",
                "push r10",
                "push r11",
                "mov rdx, rdi",
                "shr rdx, 32",
                "jnz 5f",
                "mov rax, qword ptr [rip + {hook}]",
                "test rax, rax",
                "jz 1f",
                "call rax",
                "1:",
                "pop r11",
                "pop r10",
                "pop r9",
                "pop r8",
                "mov rsp, rbp",
                "pop rbp",
                "ret",
                // Vector registers to keep: rdx of them (16 at most).
                "5:",
                "sub rsp, 272",
                "mov [rsp + 256], rdx",
                "cmp edx, 1", "jb 2f", "movaps [rsp + 0], xmm0",
                "cmp edx, 2", "jb 2f", "movaps [rsp + 16], xmm1",
                "cmp edx, 3", "jb 2f", "movaps [rsp + 32], xmm2",
                "cmp edx, 4", "jb 2f", "movaps [rsp + 48], xmm3",
                "cmp edx, 5", "jb 2f", "movaps [rsp + 64], xmm4",
                "cmp edx, 6", "jb 2f", "movaps [rsp + 80], xmm5",
                "cmp edx, 7", "jb 2f", "movaps [rsp + 96], xmm6",
                "cmp edx, 8", "jb 2f", "movaps [rsp + 112], xmm7",
                "cmp edx, 9", "jb 2f", "movaps [rsp + 128], xmm8",
                "cmp edx, 10", "jb 2f", "movaps [rsp + 144], xmm9",
                "cmp edx, 11", "jb 2f", "movaps [rsp + 160], xmm10",
                "cmp edx, 12", "jb 2f", "movaps [rsp + 176], xmm11",
                "cmp edx, 13", "jb 2f", "movaps [rsp + 192], xmm12",
                "cmp edx, 14", "jb 2f", "movaps [rsp + 208], xmm13",
                "cmp edx, 15", "jb 2f", "movaps [rsp + 224], xmm14",
                "cmp edx, 16", "jb 2f", "movaps [rsp + 240], xmm15",
                "2:",
                "mov rax, qword ptr [rip + {hook}]",
                "test rax, rax",
                "jz 3f",
                "call rax",
                "3:",
                "mov rdx, [rsp + 256]",
                "cmp edx, 1", "jb 4f", "movaps xmm0, [rsp + 0]",
                "cmp edx, 2", "jb 4f", "movaps xmm1, [rsp + 16]",
                "cmp edx, 3", "jb 4f", "movaps xmm2, [rsp + 32]",
                "cmp edx, 4", "jb 4f", "movaps xmm3, [rsp + 48]",
                "cmp edx, 5", "jb 4f", "movaps xmm4, [rsp + 64]",
                "cmp edx, 6", "jb 4f", "movaps xmm5, [rsp + 80]",
                "cmp edx, 7", "jb 4f", "movaps xmm6, [rsp + 96]",
                "cmp edx, 8", "jb 4f", "movaps xmm7, [rsp + 112]",
                "cmp edx, 9", "jb 4f", "movaps xmm8, [rsp + 128]",
                "cmp edx, 10", "jb 4f", "movaps xmm9, [rsp + 144]",
                "cmp edx, 11", "jb 4f", "movaps xmm10, [rsp + 160]",
                "cmp edx, 12", "jb 4f", "movaps xmm11, [rsp + 176]",
                "cmp edx, 13", "jb 4f", "movaps xmm12, [rsp + 192]",
                "cmp edx, 14", "jb 4f", "movaps xmm13, [rsp + 208]",
                "cmp edx, 15", "jb 4f", "movaps xmm14, [rsp + 224]",
                "cmp edx, 16", "jb 4f", "movaps xmm15, [rsp + 240]",
                "4:",
                "add rsp, 272",
                "jmp 1b",
                hook = sym $hook,
            )
        }
    };
}
inline_user!(inline_user_enter, USER_ENTER);
inline_user!(inline_user_leave, USER_LEAVE);

/// The tracer at an inline entry: the Rust frame of the function whose
/// stack word is E ([rbp + 56] in `saving_all!`'s frame), its body's
/// return address read from the trampoline stack's top entry (the one
/// the caller just pushed).
#[unsafe(naked)]
unsafe extern "C" fn inline_tracer_enter() {
    saving_all!(
        "mov edi, edi",
        "lea rsi, [rbp + 56]",
        "call {enter}";
        enter = sym inline_tracer_enter_c
    )
}

extern "C" fn inline_tracer_enter_c(id: u32, slot: *mut usize) {
    let x = unwind::xs_top_r2();
    enter_t_c(id, slot, x);
}

/// The tracer at an inline exit: closes the Rust frame of E.
#[unsafe(naked)]
unsafe extern "C" fn inline_tracer_leave() {
    saving_all!(
        "lea rdi, [rbp + 56]",
        "call {leave}";
        leave = sym leave_b_c
    )
}

/// Before the first entry read the environment: reads it (which decides
/// whether the tracer runs), points the routines at their choice and
/// continues there, with the stack as the caller left it.
#[unsafe(naked)]
unsafe extern "C" fn inline_decide_enter() {
    core::arch::naked_asm!(
        "call {decide}",
        "mov rax, qword ptr [rip + {f}@GOTPCREL]",
        "jmp qword ptr [rax]",
        decide = sym inline_decide_saving,
        f = sym __mantle_instr_enter_fn,
    )
}

#[unsafe(naked)]
unsafe extern "C" fn inline_decide_leave() {
    core::arch::naked_asm!(
        "call {decide}",
        "mov rax, qword ptr [rip + {f}@GOTPCREL]",
        "jmp qword ptr [rax]",
        decide = sym inline_decide_saving,
        f = sym __mantle_instr_leave_fn,
    )
}

#[unsafe(naked)]
unsafe extern "C" fn inline_decide_saving() {
    saving_all!(
        "call {decide}";
        decide = sym inline_decide
    )
}

extern "C" fn inline_decide() {
    tracer::init();
    update_hook_fns();
}

/// Bytes of the block that hold the header and `cap` entries, rounded up
/// to pages.
fn xs_bytes_for(cap: usize) -> usize {
    (16 + cap * XS_ENTRY).next_multiple_of(4096)
}

/// Frees the thread's trampoline stack when the thread ends.
struct XsGuard(std::cell::Cell<usize>);

impl Drop for XsGuard {
    fn drop(&mut self) {
        let slot = self.0.get() as *mut *mut u8;
        if slot.is_null() {
            return;
        }
        // SAFETY: `slot` is this thread's TLS pointer, set by xs_alloc to
        // a mapping of XS_BYTES; cleared first, so a trampoline run by a
        // later destructor reserves a new one instead of using this.
        unsafe {
            let p = *slot;
            *slot = std::ptr::null_mut();
            if !p.is_null() {
                libc::munmap(p.cast(), XS_BYTES);
            }
        }
    }
}

thread_local! {
    static XS_GUARD: XsGuard = const { XsGuard(std::cell::Cell::new(0)) };
}

/// Reserves the calling thread's trampoline stack into `slot` (its TLS
/// pointer), called from the assembly with every register saved. Only
/// system calls (mmap, mprotect): a signal handler may be the thread's
/// first trampoline.
extern "C" fn xs_alloc(slot: *mut *mut u8) {
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            XS_BYTES,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        lost(b"libmantle-instr: cannot map the trampoline stack\n");
    }
    // SAFETY: the first pages of that mapping, ours alone.
    let rc = unsafe {
        libc::mprotect(
            p,
            xs_bytes_for(XS_FIRST),
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if rc != 0 {
        lost(b"libmantle-instr: cannot map the trampoline stack\n");
    }
    let p = p.cast::<u8>();
    // SAFETY: the header of the block just made writable (zero-filled:
    // len 0).
    unsafe { *p.add(8).cast::<usize>() = XS_FIRST };
    // SAFETY: `slot` is the thread's TLS pointer, computed by the caller.
    unsafe { *slot = p };
    // The guard unmaps it at thread exit; when thread-local destructors
    // already ran (a trampoline in a late destructor), it stays.
    let _ = XS_GUARD.try_with(|g| g.0.set(slot as usize));
}

/// Makes twice the usable entries of the trampoline stack `xs` usable
/// (up to [`XS_LEN`]); called by the push when it is full, with every
/// register saved. The block never moves. A signal handler that grows it
/// in the middle of this makes the same range usable (mprotect of pages
/// already usable changes nothing) and the larger capacity wins.
extern "C" fn xs_grow(xs: *mut u8) {
    // SAFETY: `xs` is the thread's block; its header is always mapped.
    let cap_at = unsafe { &*xs.add(8).cast::<AtomicUsize>() };
    let cap = cap_at.load(Ordering::Relaxed);
    if cap >= XS_LEN {
        too_deep();
    }
    let new = ((cap + 1) * 2 - 1).min(XS_LEN);
    // SAFETY: a prefix of the thread's own reservation.
    let rc = unsafe {
        libc::mprotect(
            xs.cast(),
            xs_bytes_for(new).min(XS_BYTES.next_multiple_of(4096)),
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    if rc != 0 {
        lost(b"libmantle-instr: cannot grow the trampoline stack\n");
    }
    cap_at.fetch_max(new, Ordering::Relaxed);
}

/// Calls [`xs_grow`] with the stack in rcx, keeping every register.
#[unsafe(naked)]
unsafe extern "C" fn xs_grow_saving() {
    saving_all!(
        "mov rdi, rcx",
        "call {grow}";
        grow = sym xs_grow
    )
}

/// Calls [`xs_alloc`] with the TLS pointer's address, keeping every
/// register.
#[unsafe(naked)]
unsafe extern "C" fn xs_alloc_saving() {
    saving_all!(
        "mov rdi, qword ptr [rip + __mantle_instr_xs@GOTTPOFF]",
        "add rdi, qword ptr fs:[0]",
        "call {alloc}";
        alloc = sym xs_alloc
    )
}

/// The thread's trampoline stack into rcx (allocated at first use).
/// Labels 1 local to each use.
macro_rules! xs_into_rcx {
    () => {
        "1:\n mov rcx, qword ptr [rip + __mantle_instr_xs@GOTTPOFF]\n mov rcx, qword ptr fs:[rcx]\n test rcx, rcx\n jnz 1f\n call {xs_alloc}\n jmp 1b\n 1:"
    };
}

/// The five registers the trampolines' assembly uses, saved and restored
/// (rax, rcx, rdx, rsi, rdi: 40 bytes).
macro_rules! push_scratch {
    () => {
        "push rax\n push rcx\n push rdx\n push rsi\n push rdi"
    };
}
macro_rules! pop_scratch {
    () => {
        "pop rdi\n pop rsi\n pop rdx\n pop rcx\n pop rax"
    };
}

/// Calls the hook in rax with rsp aligned (flags are dead here: no
/// caller keeps them across a call).
macro_rules! aligned_call_rax {
    () => {
        "push rbp\n mov rbp, rsp\n and rsp, -16\n call rax\n mov rsp, rbp\n pop rbp"
    };
}

/// Calls the hook of `$fast` (directly) or else of `$user` (through
/// `{saving}`, [`hook_keeping_entry`] or [`hook_keeping_exit`]) with the id
/// in rdi; neither: falls through.
/// Clobbers rax and the flags only (a fast hook keeps the rest itself).
/// Labels 7 and 8 are local to each use.
macro_rules! call_hook {
    ($fast:literal, $user:literal) => {
        concat!(
            "mov rax, qword ptr [rip + {",
            $fast,
            "}]\n",
            "test rax, rax\n",
            "jz 7f\n",
            aligned_call_rax!(),
            "\n",
            "jmp 8f\n",
            "7:\n",
            "mov rax, qword ptr [rip + {",
            $user,
            "}]\n",
            "test rax, rax\n",
            "jz 8f\n",
            "call {saving}\n",
            "8:"
        )
    };
}

/// Closes the top entry of the trampolines' stack (rcx), at rsi, found
/// dead (skipped by longjmp), with its leave hook; then (or at once, if
/// it is gone) continues at label 2. A signal handler running
/// instrumented code may have closed it, and more, since the caller
/// looked: the entry is claimed first (sp = MAX: no handler closes a
/// claim) and closed only if it is still the top, else the caller looks
/// again. Without that, both closed it and the second `dec` took a live
/// frame (tests/c/sigpop.c). Uses rdi and rax (the hook's).
macro_rules! close_dead {
    () => {
        concat!(
            "mov qword ptr [rsi], -1\n",
            "mov rdi, [rcx]\n",
            "shl rdi, 5\n",
            "lea rdi, [rcx + rdi - 16]\n",
            "cmp rdi, rsi\n",
            "jne 2b\n",
            "mov rdi, [rsi + 24]\n",
            "dec qword ptr [rcx]\n",
            call_hook!("fast_leave", "user_leave"),
        )
    };
}

/// The end of the trampolines' entry and exit: the hook (fast or ordinary)
/// with the id in rdi and return; no hook: return if the tracer is off
/// (`{tracer}` is `{tracer_off}`: no output asked for), else continue in `{slow}`
/// (the tracer's Rust frames; its first run decides whether the tracer is
/// on); label 9: `{fail}` (which does not return). `pop` keeps the flags
/// of the `cmp`.
macro_rules! hook_and_return {
    ($fast:literal, $user:literal) => {
        concat!(
            "mov rax, qword ptr [rip + {",
            $fast,
            "}]\n",
            "or rax, qword ptr [rip + {",
            $user,
            "}]\n",
            "jz 6f\n",
            call_hook!($fast, $user),
            "\n",
            pop_scratch!(),
            "\n",
            "ret\n",
            "6:\n",
            "cmp qword ptr [rip + {tracer}], {tracer_off}\n",
            pop_scratch!(),
            "\n",
            "jne {slow}\n",
            "ret\n",
            "9:\n",
            "and rsp, -16\n",
            "call {fail}\n",
            "ud2"
        )
    };
}

/// Calls an ordinary C hook (in rax, the id in rdi) from a trampoline's
/// entry or exit, keeping what the function's callers and itself may
/// still need (mantle-instr's vregs.rs says how the rewriter knows): the
/// nine caller-saved general registers, and xmm0 up to the count in the
/// trampoline's byte `$at` bytes from the return address the trampoline's
/// call left (R1 at entry, R3 at exit: [rbp + 56] here, above the five
/// scratch registers the trampoline path pushed). Only those vector
/// registers are stored and loaded: a full save was 32 of each per call
/// (bench/instr/RESULTS.md). A count above 16 saves all 16.
macro_rules! hook_keeping {
    ($name:ident, $at:literal) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "and rsp, -16",
                push_gprs!(),
                "sub rsp, 256",
                "mov rdx, [rbp + 56]",
                concat!("movzx edx, byte ptr [rdx ", $at, "]"),
                "cmp edx, 1",
                "jb 2f",
                "movaps [rsp + 0], xmm0",
                "cmp edx, 2",
                "jb 2f",
                "movaps [rsp + 16], xmm1",
                "cmp edx, 3",
                "jb 2f",
                "movaps [rsp + 32], xmm2",
                "cmp edx, 4",
                "jb 2f",
                "movaps [rsp + 48], xmm3",
                "cmp edx, 5",
                "jb 2f",
                "movaps [rsp + 64], xmm4",
                "cmp edx, 6",
                "jb 2f",
                "movaps [rsp + 80], xmm5",
                "cmp edx, 7",
                "jb 2f",
                "movaps [rsp + 96], xmm6",
                "cmp edx, 8",
                "jb 2f",
                "movaps [rsp + 112], xmm7",
                "cmp edx, 9",
                "jb 2f",
                "movaps [rsp + 128], xmm8",
                "cmp edx, 10",
                "jb 2f",
                "movaps [rsp + 144], xmm9",
                "cmp edx, 11",
                "jb 2f",
                "movaps [rsp + 160], xmm10",
                "cmp edx, 12",
                "jb 2f",
                "movaps [rsp + 176], xmm11",
                "cmp edx, 13",
                "jb 2f",
                "movaps [rsp + 192], xmm12",
                "cmp edx, 14",
                "jb 2f",
                "movaps [rsp + 208], xmm13",
                "cmp edx, 15",
                "jb 2f",
                "movaps [rsp + 224], xmm14",
                "cmp edx, 16",
                "jb 2f",
                "movaps [rsp + 240], xmm15",
                "2:",
                "call rax",
                "mov rdx, [rbp + 56]",
                concat!("movzx edx, byte ptr [rdx ", $at, "]"),
                "cmp edx, 1",
                "jb 3f",
                "movaps xmm0, [rsp + 0]",
                "cmp edx, 2",
                "jb 3f",
                "movaps xmm1, [rsp + 16]",
                "cmp edx, 3",
                "jb 3f",
                "movaps xmm2, [rsp + 32]",
                "cmp edx, 4",
                "jb 3f",
                "movaps xmm3, [rsp + 48]",
                "cmp edx, 5",
                "jb 3f",
                "movaps xmm4, [rsp + 64]",
                "cmp edx, 6",
                "jb 3f",
                "movaps xmm5, [rsp + 80]",
                "cmp edx, 7",
                "jb 3f",
                "movaps xmm6, [rsp + 96]",
                "cmp edx, 8",
                "jb 3f",
                "movaps xmm7, [rsp + 112]",
                "cmp edx, 9",
                "jb 3f",
                "movaps xmm8, [rsp + 128]",
                "cmp edx, 10",
                "jb 3f",
                "movaps xmm9, [rsp + 144]",
                "cmp edx, 11",
                "jb 3f",
                "movaps xmm10, [rsp + 160]",
                "cmp edx, 12",
                "jb 3f",
                "movaps xmm11, [rsp + 176]",
                "cmp edx, 13",
                "jb 3f",
                "movaps xmm12, [rsp + 192]",
                "cmp edx, 14",
                "jb 3f",
                "movaps xmm13, [rsp + 208]",
                "cmp edx, 15",
                "jb 3f",
                "movaps xmm14, [rsp + 224]",
                "cmp edx, 16",
                "jb 3f",
                "movaps xmm15, [rsp + 240]",
                "3:",
                "add rsp, 256",
                pop_gprs!(),
                "mov rsp, rbp",
                "pop rbp",
                "ret",
            )
        }
    };
}
// The trampoline's bytes (mantle-instr's rewrite.rs lays them out and
// asserts the same offsets): the entry count at R1 + 6, the exit count at
// R3 - 21.
hook_keeping!(hook_keeping_entry, "+ 6");
hook_keeping!(hook_keeping_exit, "- 21");

/// The entry of a call-through trampoline (the default exit design):
///
/// ```text
/// tramp:  call __mantle_instr_tramp_enter ; keeps the caller's return address X
///         jmp  short body_call ; .long id ; .byte keep_entry, keep_exit
///         lea  rsp, [rsp + 8]           ; drop X (kept in the thread's frame)
///         call body                     ; the function runs with its own
///                                       ; stack layout, returning here (R2)
///         lea  rsp, [rsp - 8]
///         call __mantle_instr_tramp_leave ; puts X back at [rsp]
///         ret                           ; to X
/// ```
///
/// Every `call` has its `ret`, so the return predictor stays right (the
/// caller's own `call` pairs with the trampoline's final `ret`), and the
/// function's stack arguments are where they were (no shift by 8).
///
/// Fast path, in assembly: pushes `{E, X, R2, id}` on
/// `__mantle_instr_xs` (after popping frames below E, skipped by longjmp,
/// or at E but not the tail caller: X is not their R2; never a frame of
/// the code that a handler on an alternate signal stack interrupted,
/// `on_other_stack`), and calls a fast enter hook directly with
/// five scratch registers saved (such a hook saves what it uses itself:
/// `mantle_instr_set_fast_hooks`), or an ordinary hook through
/// `hook_keeping_entry`. With neither it continues in `enter_t_slow`
/// (every register saved, Rust frames for the tracer).
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_tramp_enter() {
    core::arch::naked_asm!(
        // [rsp] = R1 (the id is at R1 + 2), [rsp + 8] = X, E = rsp + 8.
        push_scratch!(),
        // Now R1 = [rsp + 40], X = [rsp + 48], E = rsp + 48.
        xs_into_rcx!(),
        "lea rdx, [rsp + 48]",
        "mov rax, [rsp + 48]",
        "2:",
        "mov rsi, [rcx]",
        "test rsi, rsi",
        "jz 4f",
        "shl rsi, 5",
        "lea rsi, [rcx + rsi - 16]",
        "cmp [rsi], rdx",
        "ja 4f",
        "jb 3f",
        "cmp [rsi + 16], rax",
        "je 4f",
        // Dead: skipped by longjmp, unless this is a signal handler on
        // an alternate stack and the entry is the interrupted code's, on
        // another stack, whatever the addresses say (one sigaltstack(2)
        // call, on this path only).
        "3:",
        "push rdx",
        "push qword ptr [rsi]",
        "call {other}",
        "pop rdi",
        "pop rdx",
        "test rdi, rdi",
        "jnz 4f",
        close_dead!(),
        "mov rax, [rsp + 48]",
        "jmp 2b",
        // Push. A signal handler running instrumented code may come at
        // any point: the entry is claimed with sp = MAX (a live frame to
        // anyone above) before the length grows, and completed after.
        // A handler that comes between the claim and the count pushes
        // its own frames into this very entry; every pop therefore
        // leaves sp = MAX behind, so the claim is still there when the
        // handler returns. Without that, a second handler one
        // instruction later (a timer signal that fell due during the
        // first handler can land there: a core dump showed it) found the
        // first one's stale sp, took this entry for a dead frame and
        // popped it: "trampoline frame lost" in CI's signals fixture
        // (tests/c/sigstep.c now runs a handler at every instruction).
        // Full: grown in place (or abort past XS_LEN), then again.
        "5:",
        "call {grow}",
        "4:",
        "mov rsi, [rcx]",
        "cmp rsi, [rcx + 8]",
        "jae 5b",
        "shl rsi, 5",
        "lea rsi, [rcx + rsi + 16]",
        "mov qword ptr [rsi], -1",
        "inc qword ptr [rcx]",
        "mov [rsi + 8], rax",
        "mov rax, [rsp + 40]",
        "lea rdi, [rax + {off}]",
        "mov [rsi + 16], rdi",
        "mov edi, dword ptr [rax + 2]",
        "mov [rsi + 24], rdi",
        "mov [rsi], rdx",
        hook_and_return!("fast_enter", "user_enter"),
        grow = sym xs_grow_saving,
        off = const TRAMP_RET_OFFSET,
        fast_enter = sym FAST_ENTER,
        fast_leave = sym FAST_LEAVE,
        user_enter = sym USER_ENTER,
        user_leave = sym USER_LEAVE,
        saving = sym hook_keeping_entry,
        slow = sym enter_t_slow,
        tracer = sym TRACER,
        tracer_off = const TRACER_OFF,
        fail = sym too_deep,
        xs_alloc = sym xs_alloc_saving,
        other = sym on_other_stack_saving,
    )
}

/// Whether a trampoline entry at stack address `sp`, which looks dead to
/// a frame at `e` (below it, as if skipped by longjmp), is in fact on
/// another stack: `e` on the thread's alternate signal stack and `sp` off
/// it, the code a handler interrupted. Addresses on two stacks say
/// nothing about which frame is older: an alternate stack above the
/// frames a handler interrupted made it pop them as dead
/// (tests/c/sigalt.c). 1 if so, else 0.
extern "C" fn on_other_stack(sp: usize, e: usize) -> usize {
    // SAFETY: sigaltstack(2) with no new stack only writes the current
    // one into `ss`, a zeroed stack_t (plain integers and a pointer).
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) };
    if rc != 0 || ss.ss_flags & libc::SS_ONSTACK == 0 {
        return 0;
    }
    let lo = ss.ss_sp as usize;
    let on = |a: usize| a >= lo && a - lo < ss.ss_size;
    usize::from(on(e) && !on(sp))
}

/// Calls [`on_other_stack`] keeping every register: the entry's sp at
/// [rsp + 8] and the frame's at [rsp + 16] when called; the answer
/// replaces the first.
#[unsafe(naked)]
unsafe extern "C" fn on_other_stack_saving() {
    saving_all!(
        "mov rdi, [rbp + 16]",
        "mov rsi, [rbp + 24]",
        "call {f}",
        "mov [rbp + 16], rax";
        f = sym on_other_stack
    )
}

/// The entry of a trampoline when no user hook is set: the Rust frame for
/// the tracer. [rbp + 8] is R1, [rbp + 16] holds X.
#[unsafe(naked)]
unsafe extern "C" fn enter_t_slow() {
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

/// The exit of a call-through trampoline: [rsp + 8] is the stack word
/// where the function's return address was; the caller's (X) is written
/// back there for the trampoline's `ret`. Pops the entries above its own
/// (frames skipped by longjmp, claims left by a signal handler that
/// jumped out); a frame that is not there means the stack was corrupted:
/// abort rather than return anywhere.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __mantle_instr_tramp_leave() {
    core::arch::naked_asm!(
        push_scratch!(),
        // [rsp + 40] = R3, E = rsp + 48.
        xs_into_rcx!(),
        "lea rdx, [rsp + 48]",
        "2:",
        "mov rsi, [rcx]",
        "test rsi, rsi",
        "jz 9f",
        "shl rsi, 5",
        "lea rsi, [rcx + rsi - 16]",
        "cmp [rsi], rdx",
        "je 4f",
        "jb 3f",
        // Above this frame and not a stack address: a claim whose push
        // never completed, left by a signal handler that jumped out
        // (siglongjmp) of the code it interrupted. Its enter hook never
        // ran: dropped without a leave. Anything else above is a
        // corrupted stack.
        "cmp qword ptr [rsi], -1",
        "jne 9f",
        "dec qword ptr [rcx]",
        "jmp 2b",
        // Below this frame: skipped by longjmp, closed with its leave.
        "3:",
        close_dead!(),
        "jmp 2b",
        // Read the entry before the length shrinks (a signal handler
        // may reuse the slot right after), and leave the claim behind
        // (see __mantle_instr_tramp_enter's push).
        "4:",
        "mov rax, [rsi + 8]",
        "mov [rdx], rax",
        "mov rdi, [rsi + 24]",
        "mov qword ptr [rsi], -1",
        "dec qword ptr [rcx]",
        hook_and_return!("fast_leave", "user_leave"),
        // References that bring crate::unwind's definitions into every
        // link of libmantle_instr_rt.a that has trampolines (an archive
        // member is linked only for a symbol something needs): without
        // them a C++ exception could not cross a trampoline.
        ".pushsection .data.rel.ro.mantle_instr_unwind,\"aw\",@progbits",
        ".p2align 3",
        ".quad {u1}",
        ".quad {u2}",
        ".quad {u3}",
        ".quad {u4}",
        ".quad {u5}",
        ".quad {u6}",
        ".popsection",
        u1 = sym unwind::_Unwind_RaiseException,
        u2 = sym unwind::_Unwind_Resume,
        u3 = sym unwind::_Unwind_Resume_or_Rethrow,
        u4 = sym unwind::_Unwind_ForcedUnwind,
        u5 = sym unwind::__gxx_personality_v0,
        u6 = sym unwind::__gcc_personality_v0,
        fast_leave = sym FAST_LEAVE,
        user_leave = sym USER_LEAVE,
        saving = sym hook_keeping_exit,
        slow = sym leave_t_slow,
        tracer = sym TRACER,
        tracer_off = const TRACER_OFF,
        fail = sym tramp_lost,
        xs_alloc = sym xs_alloc_saving,
    )
}

/// The exit of a trampoline when no user hook is set: closes the Rust
/// frame whose return address lived at [rbp + 16].
#[unsafe(naked)]
unsafe extern "C" fn leave_t_slow() {
    saving_all!(
        "lea rdi, [rbp + 16]",
        "call {leave}";
        leave = sym leave_b_c
    )
}

extern "C" fn tramp_lost() -> ! {
    lost(b"libmantle-instr: trampoline frame lost\n")
}

extern "C" fn too_deep() -> ! {
    lost(b"libmantle-instr: more than 4194304 nested trampolines on one thread\n")
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

pub(crate) fn slots_base() -> usize {
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
    /// TSC costs 11 ns a read on these VMs: bench/instr/HISTORY.md).
    pub t0: u64,
    /// TSC ticks spent in instrumented callees (exclusive time).
    pub child: u64,
}

pub(crate) struct Thread {
    pub frames: Vec<Frame>,
    pub trace: tracer::ThreadTrace,
}

thread_local! {
    pub(crate) static THREAD: UnsafeCell<Thread> = UnsafeCell::new(Thread {
        frames: Vec::with_capacity(64),
        trace: tracer::ThreadTrace::new(),
    });
}

#[inline]
fn now() -> u64 {
    // SAFETY: rdtsc has no memory effects; x86-64 always has it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The time for an event whose hook is `hook`: the tracer needs the TSC,
/// a user hook does not (and a read costs 11 ns here).
#[inline]
pub(crate) fn stamp(hook: &AtomicUsize) -> u64 {
    if hook.load(Ordering::Relaxed) == 0 && tracer_on() {
        now()
    } else {
        0
    }
}

pub(crate) fn user(hook: &AtomicUsize) -> Option<Hook> {
    match hook.load(Ordering::Acquire) {
        0 => None,
        // SAFETY: only mantle_instr_set_hooks stores non-zero values, and
        // they are `Hook` function pointers.
        f => Some(unsafe { std::mem::transmute::<usize, Hook>(f) }),
    }
}

/// Closes the top frame at time `t` (its function returned, or was
/// skipped by longjmp).
pub(crate) fn close(th: &mut Thread, t: u64) -> Option<Frame> {
    let f = th.frames.pop()?;
    match user(&USER_LEAVE) {
        Some(h) => h(f.id),
        None if tracer_on() => {
            let parent = th.frames.last_mut();
            th.trace.leave(&f, t, parent);
        }
        None => {}
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

/// Pushes the Rust frame of a trampoline's function (its return address
/// is kept by the assembly fast path, in `__mantle_instr_xs`).
extern "C" fn enter_t_c(id: u32, slot: *mut usize, body_ret: usize) {
    enter_common(id, slot, Entry::Trampoline(body_ret));
}

/// Pushes a frame (none if the thread's data is gone: the function then
/// runs uninstrumented, its return address untouched).
fn enter_common(id: u32, slot: *mut usize, how: Entry) {
    tracer::init();
    THREAD
        .try_with(|cell| {
            // SAFETY: the thread's own data; the hooks are not reentrant
            // (the runtime calls no instrumented code), so no other
            // reference lives.
            let th = unsafe { &mut *cell.get() };
            // No hook and no tracer: a frame is needed only to give a
            // return-frame function its return address back.
            if how != Entry::ReturnFrame && !tracer_on() && user(&USER_ENTER).is_none() {
                return;
            }
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
                None if tracer_on() => th.trace.enter(id, t),
                None => {}
            }
        })
        .ok();
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
/// Every signal is blocked first: a handler running instrumented code
/// would find the same broken stack and call abort(3) again from inside
/// the first abort, which waits forever on glibc's abort lock (seen with
/// tests/c/sigjump.c on the runtime of a3350a7, before the claim rules:
/// a hang, not an abort). A synchronous signal (a trap) still ends the process.
pub(crate) fn lost(msg: &[u8]) -> ! {
    // SAFETY: a sigset_t filled by sigfillset and given to
    // pthread_sigmask; write(2) of a caller's buffer; abort.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
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

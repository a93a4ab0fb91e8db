//! mantle-exec: the executive (Hijack, seeds/001, sections 2 and 3.1) on an
//! unmodified Linux.
//!
//! In a nutshell: `mantle run -- CMD` makes this process the executive of
//! CMD's process tree (its *guests*). Every system call an agent asked for
//! leaves the guest and reaches the executive, which runs the agents'
//! chain and carries out their decision: let the kernel run the call,
//! fail it, replace its result, perform a changed call on the guest's
//! behalf, or hold it. Every other call runs natively at full speed.
//!
//! Mechanism:
//! * **Protected path** (`protected`): a seccomp filter installed in the
//!   guest between fork and exec sends the wanted calls to a user
//!   notification fd that the executive holds. The guest cannot reach the
//!   executive's memory (it is another process) and cannot remove the
//!   filter.
//! * **Fast path** ([`fast`]): a preloaded stub (`stub/`, LD_PRELOAD)
//!   traps the calls in the guest with Syscall User Dispatch and forwards
//!   them through a per-thread slot of shared memory
//!   ([`mantle_abi::exec`]); the executive validates every slot it reads
//!   and keeps none of its own state there. Opt-in site rewriting turns a
//!   trapped `mov $nr,%eax; syscall` into a jump that skips the signal.
//!   Details and measurements: docs/exec-fast.md.
//! * **Calls to the executive** ([`rpc`]): a reserved system call number
//!   (mantle_abi::exec::SYS_EXEC) always in the protected path's filter:
//!   a ping, RPC between two guests through the executive
//!   (libmantle's `mantle_exec_call`, `mantle_rpc_*`), and the broker of
//!   guest ↔ guest channels, whose calls then bypass the executive
//!   (`mantle_chan_*`). Not on the fast path.
//! * Both paths feed the same [`agent::Chain`]; the application-kernel mode
//!   (multicore issue) will reuse the same trap.
//! * **Enforcement** ([`enforce`]): what an agent enforces (`--deny` by
//!   call family, [`family`]; `--redirect`) is the kernel's on both
//!   paths: the seccomp filter (its refusals, and its notifications to the
//!   protected executive or to the fast path's gate, [`fast::gate`]) and
//!   a private mount namespace. The fast path's stub and shared memory
//!   only accelerate what observes or schedules.
//!
//! Invariants: nothing the guest wrote is trusted (memory reads are
//! claims, re-validated against the pending call); no enforcing decision
//! rests on anything in the guest's address space or on memory a guest
//! thread can change after a check; a vanished notification (the guest
//! died, a signal interrupted the call) is normal, never fatal.
//!
//! Processes and threads: `mantle run` is the reaper (parent, subreaper;
//! it kills what is left of the guests if the executive dies, `reaper`),
//! the executive (one thread serving every guest, `executive`) and its
//! opener thread (performs opens with the guest's identity, `perform`);
//! on the fast path, the gate thread when something is denied.
//!
//! Lock order: no locks are shared on the interposition path. The
//! executive and the opener exchange requests over channels; the gate
//! owns its chain and shares only atomic counters; the fast
//! path's slots are lock-free (a state word per slot, futex waits); the
//! `--count` table is atomics.
//! Locks that several executive threads share (the executive on N CPUs,
//! issue 31) are [`lockstat::StatLock`]s: counted, and ranked by the one
//! table [`lockstat::rank`], which debug builds check on every
//! acquisition.

// Every system call is mantle-sys's (supervise, seccomp, shm, os).
#![forbid(unsafe_code)]

pub mod agent;
pub mod agents;
pub mod dispatch;
pub mod enforce;
pub mod executive;
pub mod executor;
pub mod family;
pub mod fast;
pub mod kept;
pub mod launch;
pub mod lockstat;
pub mod perform;
pub mod protected;
pub mod qos;
pub mod reaper;
pub mod rpc;
/// The scheduling policies, a pure crate of their own (`mantle-sched`).
pub use mantle_sched as sched;
pub mod spec;
pub mod status;
pub mod sysno;
pub mod system;

pub use agent::{Agent, Call, Chain, Decision, Guest, GuestError, Outcome, Perform, Times};
pub use sysno::Sysno;

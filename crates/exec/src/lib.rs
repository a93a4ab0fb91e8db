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
//! the executive (`executive`: one thread per CPU of `[executive] cpus`,
//! each pinned there and serving the guests placed on its CPU, or one
//! unpinned thread serving every guest) and its opener thread (performs
//! opens with the guest's identity, `perform`); on the fast path, the
//! gate thread when something is denied.
//!
//! Lock order (the executive on N CPUs, issue 31; ranks in
//! [`lockstat::rank`], checked on every acquisition in debug builds):
//!
//! ```text
//!   giant (10)  ->  runqueue (20)  ->  guest (40)  ->  executive (50)
//! ```
//!
//! A thread takes a lock only if its rank is above every lock it holds,
//! and never holds two locks of one rank (two run queues, two guests):
//! * `giant` (Locking::Giant only): taken when a thread's wait returns,
//!   released before its next wait; the locks below are still taken
//!   inside it, uncontended, so both designs run the same code.
//! * `runqueue`, one per executive thread: the guests it serves; held by
//!   its thread while it serves a batch of ready fds, so that a guest is
//!   served by one thread at a time. A guest moves (the dispatcher
//!   placed it on another CPU) by leaving one queue, then joining the
//!   other, one lock after the other.
//! * `guest`, one per guest: its chain (each guest has its own agent
//!   instances: the agents' state is the guest's), counts and end; held
//!   from the decision to the `after` of one call.
//! * `executive`: what all guests share (held calls, the executor's
//!   timers and parents, RPC, dispatch, QoS, boosts, the publisher, the
//!   log): taken inside a guest's lock for the decisions that need it,
//!   never for Continue, Fail or Return, so that two CPUs answering their
//!   guests' plain calls share no lock.
//!
//! Off the executive's locks: the opener exchanges requests over
//! channels; the fast path's gate owns its chain and shares only atomic
//! counters; the fast path's slots are lock-free (a state word per slot,
//! futex waits), and its server's threads take the same four locks
//! (`fast::server`: a run queue per thread, the guest tree's chain as
//! `guest`, the kept timers as `executive`); the `--count` table is
//! atomics.

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

//! mantle-lockmodel: a discrete-event model of the executive on N CPUs,
//! under one giant lock or under fine locks (issue 31; Kågström's thesis,
//! seeds/004, Paper II, section 3.4 and Table 3.1).
//!
//! # Why a model
//! The build and CI machines have two CPUs. The thesis asks how a system
//! service scales when every call into it takes a giant lock, and how much
//! finer locks recover; two CPUs show only the first step of that curve.
//! This crate predicts the rest (4, 8, 16, 64 CPUs) from what the real
//! executive measures on the CPUs it has: the time each call holds each
//! lock (its lock statistics), the time a call spends in the executive
//! outside any lock, and the guests' user work between calls.
//!
//! # The mechanism
//! Each CPU runs guests that loop: user work of `user` ns, then one call
//! into the executive thread of their CPU. A call is a [`Call`]: a list of
//! [`Segment`]s run in order, each either outside any lock or holding one
//! [`LockRef`] — the giant lock, the CPU's own run-queue lock, or one
//! shared lock (the guest table, an agent's state). Locks are FIFO ticket
//! locks and waiters spin, as the thesis's giant lock does: a CPU waiting
//! for a lock does nothing else.
//!
//! The simulation processes requests in time order from one event queue,
//! so a request that arrives at `t` is granted at `max(t, free_at)` of its
//! lock and the lock is then free at the grant plus the hold: that is
//! exactly a FIFO lock's behaviour, without a waiter list. When a lock
//! passes from one CPU to another the hold grows by `handoff` ns: the
//! lock's cache line and the data it guards move between caches (the
//! thesis names this as the second reason its speedup fell short). That
//! one parameter is fitted from the 2-CPU measurement and then held fixed.
//!
//! # Assumptions (say what the model cannot see)
//! * Segments do not nest: a call releases one lock before it takes the
//!   next. The fine executive's lock order makes nesting rare and short;
//!   a nested hold shows up here as a longer hold of the outer lock.
//! * Hold and user times are drawn independently from their measured
//!   distributions ([`Dist`]): no correlation between successive calls.
//! * No preemption of a lock holder, no interrupts, no host load: the
//!   executive's threads run at a real-time priority on CPUs of their own.
//! * `handoff` is constant: memory bandwidth and NUMA distance do not grow
//!   with the CPU count. At 64 CPUs this is optimistic for the giant lock.
//!
//! # Invariants
//! * Pure: no system calls, no clocks, no threads; the random numbers come
//!   from a seeded generator, so a run is a function of its inputs.
//! * Time is conserved: on every CPU, user + executive + waiting time
//!   equals that CPU's finishing time, exactly (tested).
//!
//! # Lock order
//! None: every value is owned by its caller.

mod sim;
mod sweep;

pub use sim::{simulate, Call, Dist, LockRef, LockStats, ModelError, Outcome, Segment, Workload};
pub use sweep::{fit_handoff, speedup, Speedup};

//! mantle-comp: a runtime of isolated components that call each other
//! synchronously, with per-component caches of transient memory
//! (execution contexts and CBUFs) managed by TMEM managers, and the
//! managers' policy interface (Table II) driven by a policy loop — the
//! TMEM paper (seeds/003, §III–§V) on Linux.
//!
//! The mechanism in a few lines: a component is a process started by the
//! [`manager`] from a [`system`] file. Each component has an invocation
//! region (a memfd; layout in `mantle_abi::comp`) mapped by the manager,
//! the component and the components allowed to invoke it. Its slots are
//! execution contexts — one thread with its own stack each, parked on a
//! futex word. An invocation ([`runtime::Server::invoke`]) pops a context
//! off the region's lock-free freelist, writes up to six words, wakes the
//! context, and sleeps until it answers; the context runs the function at
//! the caller's priority (thread migration). An empty freelist goes to
//! [`runtime::tmem_get`]: relinquish bit, FUTEX_LOCK_PI on a holder's PI
//! word (the kernel boosts the holder), sleep until `tmem_put`; the
//! blocked thread then adds its block time to its entry of the cache's
//! block table in shared memory (`blocks`), which the manager's policy
//! run reads ([`manager::Manager::run_policy`], [`policy`]).
//!
//! Invariants:
//! * everything read from a region is validated (indices, states): a
//!   corrupted region is [`Error::Corrupt`], never a panic or an access
//!   outside it;
//! * a context on the freelist is not in use; only the holder of a popped
//!   context writes its arguments;
//! * a caller never waits forever on a dead server: the manager marks the
//!   region dead, and the caller re-checks the server's pid by itself;
//! * a restarted server gets the same region with a new epoch: a call
//!   that spans two epochs is an error and never returns its context;
//! * every memfd handed to a component is size-sealed (no SIGBUS by
//!   truncation); δ^j decisions are held to the bounds and the pool
//!   partition ([`policy::enforce`]) whatever the policy says;
//! * a context out of its cache has given its stack pages back to the
//!   kernel (`mantle_sys::stack::release_unused`), so δ^j falling lowers
//!   the component's RSS;
//! * a component that is down is not in the policy's input, and nothing
//!   of its dead instance's tables is compared with the new instance's.
//!
//! Pure cores: [`system`] (file, graph), [`policy`] (Table II) and
//! [`tmem`] (Algorithm 1 and the alternatives) make no system calls.
//!
//! Lock order: the runtime takes no locks across blocking (it blocks only
//! on futex words); in the manager process, `Manager::cbufs` is the only
//! lock and is taken alone (see [`manager`]).

mod blocks;
pub mod cbuf;
pub mod manager;
pub mod policy;
pub mod region;
pub mod runtime;
pub mod system;
pub mod tmem;

pub use manager::Manager;
pub use runtime::{Env, Interface, Server};
pub use system::SystemFile;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Spec(String),
    #[error("the invocation graph has a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("shared memory is corrupted: {0}")]
    Corrupt(String),
    #[error("component {0} died during the invocation")]
    ServerDied(String),
    #[error("the server returned error {0}")]
    Remote(i32),
    #[error("cbuf: {}", std::io::Error::from_raw_os_error(*.0))]
    Cbuf(i32),
    #[error("{0} words of arguments (at most 6)")]
    Args(usize),
    #[error("component {0} may not invoke {1}")]
    NotAllowed(String, String),
    #[error("starting component {0}")]
    Start(String, #[source] std::io::Error),
    #[error("{0}")]
    Sys(&'static str, #[source] std::io::Error),
}

impl Error {
    pub(crate) fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |e| Error::Sys(what, e)
    }
}

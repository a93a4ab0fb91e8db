//! mantle-comp: a runtime of isolated components that call each other
//! synchronously, with per-component caches of transient memory
//! (execution contexts now; CBUFs next) managed by TMEM managers — the
//! TMEM paper (seeds/003, §III, §IV) on Linux.
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
//! word (the kernel boosts the holder), sleep until `tmem_put`.
//!
//! Invariants:
//! * everything read from a region is validated (indices, states): a
//!   corrupted region is [`Error::Corrupt`], never a panic or an access
//!   outside it;
//! * a context on the freelist is not in use; only the holder of a popped
//!   context writes its arguments;
//! * a caller never waits forever on a dead server: the manager marks the
//!   region dead, and the caller re-checks the server's pid by itself.
//!
//! Pure cores: [`system`] (file, graph) and [`policy`] (Table II) make no
//! system calls.
//!
//! Lock order: no locks; blocking happens only on futex words.

mod blocks;
pub mod cbuf;
pub mod manager;
pub mod policy;
pub mod region;
pub mod runtime;
pub mod system;

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

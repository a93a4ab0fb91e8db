//! The agent options of `mantle run` (and of a guest in a `--system`
//! file), kept as the user wrote them: the built-in agents module parses
//! them ([`crate::agents::from_specs`]); the CLI and the system file only
//! collect them. Pure.

use serde::Deserialize;
use std::path::PathBuf;

/// Where `--trace` writes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub enum TraceOut {
    /// Standard error (the default, like strace).
    Stderr,
    /// A file.
    File(PathBuf),
}

/// The agent options, raw strings kept (NAME, NAME=ERRNO, OLD=NEW,
/// NAME=DURATION): parsing and the chain's order are the agents module's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentSpecs {
    pub trace: Option<TraceOut>,
    pub count: bool,
    pub deny: Vec<String>,
    pub redirect: Vec<String>,
    pub delay: Vec<String>,
    pub perform: Vec<String>,
    /// Trace and count print JSON lines instead of text.
    pub json: bool,
}

impl AgentSpecs {
    /// Whether no agent was asked for (the guest runs with an empty
    /// filter: every call native).
    pub fn is_empty(&self) -> bool {
        self.trace.is_none()
            && !self.count
            && self.deny.is_empty()
            && self.redirect.is_empty()
            && self.delay.is_empty()
            && self.perform.is_empty()
    }
}

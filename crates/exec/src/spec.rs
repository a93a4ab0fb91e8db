//! The built-in agents as the user wrote them (`mantle run --trace
//! --deny openat=EACCES ...`, or a guest's table in a `--system` TOML
//! file): raw strings, parsed and checked by
//! [`crate::agents::from_specs`]. Kept apart from the parsing so that the
//! CLI and the system-file reader fill the same struct and every error
//! message comes from one place.

/// The built-in agents one guest asked for, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AgentSpecs {
    /// `--trace`: one line per watched call (see `agents::trace`).
    pub trace: bool,
    /// `--json`: the trace (and the count summary) as JSON lines.
    pub json: bool,
    /// `--count`: per-call counts and times, summarised at the end.
    pub count: bool,
    /// `--deny NAME[=ERRNO]`, each.
    pub deny: Vec<String>,
    /// `--redirect OLD=NEW`, each.
    pub redirect: Vec<String>,
    /// `--delay NAME=DURATION`, each.
    pub delay: Vec<String>,
    /// `--perform NAME`, each.
    pub perform: Vec<String>,
    /// `--trace=NAME,NAME` / `--count=NAME`: calls trace and count watch
    /// besides those the other agents want (`all` for every call). Empty:
    /// the other agents' calls, or, when there are none, a default set
    /// (`agents::DEFAULT_WATCH`). Each entry may hold a comma-separated
    /// list.
    pub watch: Vec<String>,
}

impl AgentSpecs {
    /// Whether any agent was asked for (no agent: the guest runs with an
    /// empty filter).
    pub fn is_empty(&self) -> bool {
        !self.trace
            && !self.count
            && self.deny.is_empty()
            && self.redirect.is_empty()
            && self.delay.is_empty()
            && self.perform.is_empty()
    }
}

//! The built-in agents as the user wrote them (`mantle run --trace
//! --deny openat=EACCES ...`, or a guest's table in a `--system` TOML
//! file): raw strings, parsed and checked by
//! [`crate::agents::from_specs`]. Kept apart from the parsing so that the
//! CLI and the system-file reader fill the same struct and every error
//! message comes from one place.

/// The built-in agents one guest asked for, as written. In a system file
/// (TOML) every key is optional and an unknown key is an error (a typo
/// must not silently drop an agent).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// `--stamp NAME=FILE`, each (benchmarks: the one-way trap).
    pub stamp: Vec<String>,
    /// `--sleep`: the guest's nanosleep and clock_nanosleep are held by
    /// the executive and answered when due.
    pub sleep: bool,
    /// `--timers`: the guest's setitimer(ITIMER_REAL) and alarm are kept by
    /// the executive, which sends the signals.
    pub timers: bool,
    /// The guest's own scheduling calls go to the executive's policy (set
    /// by the executive when it dispatches, not an option of its own).
    #[serde(skip)]
    pub sched_calls: bool,
    /// `--trace=NAME,NAME` / `--count=NAME`: calls trace and count watch
    /// besides those the other agents want (`all` for every call). Empty:
    /// the other agents' calls, or, when there are none, a default set
    /// (`agents::DEFAULT_WATCH`). Each entry may hold a comma-separated
    /// list.
    pub watch: Vec<String>,
    /// `--allow-io-uring`: while an agent enforces (deny, redirect),
    /// io_uring is refused (its operations are not system calls: no
    /// filter sees them); this lets the guest have it anyway.
    pub allow_io_uring: bool,
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
            && self.stamp.is_empty()
            && !self.sleep
            && !self.timers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_from_json_with_defaults_and_refuses_unknown_keys() {
        let s: AgentSpecs =
            serde_json::from_str(r#"{"trace": true, "deny": ["openat=EACCES"]}"#).unwrap();
        assert!(s.trace && !s.count);
        assert_eq!(s.deny, ["openat=EACCES"]);
        assert!(!s.is_empty());
        assert!(serde_json::from_str::<AgentSpecs>(r#"{"deny_all": true}"#).is_err());
        let back: AgentSpecs = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}

/// Where `--trace` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceOut {
    /// Standard error (the default, like strace).
    Stderr,
    /// A file (created, or truncated).
    File(std::path::PathBuf),
}

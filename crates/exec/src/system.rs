//! `mantle run --system FILE`: a whole system of guests described in TOML,
//! started under one executive. Pure (parsing and checking).
//!
//! ```toml
//! [[guest]]
//! name = "reader"                 # optional; default: the command's name
//! command = ["cat", "/etc/hostname"]
//! deny = ["openat=EACCES"]        # the same options as `mantle run`
//! perform = ["getppid"]
//! trace = true                    # or trace = "/tmp/reader.trace"
//! count = false
//! watch = ["read,write"]          # calls trace/count watch besides the others'
//! json = false
//! redirect = []
//! delay = []
//! ```
//!
//! Scheduling parameters of a guest come with issue 11; unknown keys are
//! refused so that a typo never silently means "no agent".

use crate::spec::{AgentSpecs, TraceOut};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    guest: Vec<GuestEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestEntry {
    name: Option<String>,
    command: Vec<String>,
    #[serde(default)]
    trace: Option<TraceSetting>,
    #[serde(default)]
    count: bool,
    #[serde(default)]
    json: bool,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    redirect: Vec<String>,
    #[serde(default)]
    delay: Vec<String>,
    #[serde(default)]
    perform: Vec<String>,
    #[serde(default)]
    stamp: Vec<String>,
    #[serde(default)]
    sleep: bool,
    #[serde(default)]
    timers: bool,
    #[serde(default)]
    watch: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TraceSetting {
    On(bool),
    File(PathBuf),
}

/// One guest of a system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestDef {
    pub name: String,
    pub command: Vec<String>,
    pub agents: AgentSpecs,
    /// Where the trace goes (with `agents.trace`).
    pub trace_out: TraceOut,
}

/// Parses a system file's text.
pub fn parse(text: &str) -> Result<Vec<GuestDef>, String> {
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if f.guest.is_empty() {
        return Err("no [[guest]] in the system file".into());
    }
    let mut out = Vec::new();
    for (i, g) in f.guest.into_iter().enumerate() {
        let Some(first) = g.command.first() else {
            return Err(format!("guest {}: empty command", i + 1));
        };
        let name = g
            .name
            .clone()
            .unwrap_or_else(|| first.rsplit('/').next().unwrap_or(first).to_string());
        if out.iter().any(|o: &GuestDef| o.name == name) {
            return Err(format!("two guests are named {name:?}"));
        }
        let (trace, trace_out) = match g.trace {
            None | Some(TraceSetting::On(false)) => (false, TraceOut::Stderr),
            Some(TraceSetting::On(true)) => (true, TraceOut::Stderr),
            Some(TraceSetting::File(p)) => (true, TraceOut::File(p)),
        };
        out.push(GuestDef {
            name,
            command: g.command,
            agents: AgentSpecs {
                trace,
                count: g.count,
                deny: g.deny,
                redirect: g.redirect,
                delay: g.delay,
                perform: g.perform,
                stamp: g.stamp,
                sleep: g.sleep,
                timers: g.timers,
                json: g.json,
                watch: g.watch,
            },
            trace_out,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_guests_and_refuses_typos() {
        let g = parse(
            r#"
[[guest]]
command = ["/bin/cat", "/etc/hostname"]
deny = ["openat=EACCES"]
[[guest]]
name = "b"
command = ["true"]
trace = "/tmp/t"
"#,
        )
        .unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "cat");
        assert_eq!(g[0].agents.deny, vec!["openat=EACCES".to_string()]);
        assert!(g[1].agents.trace);
        assert_eq!(g[1].trace_out, TraceOut::File("/tmp/t".into()));
        assert!(parse("[[guest]]\ncommand = [\"x\"]\ndeny_ = []\n").is_err());
        assert!(parse("[[guest]]\ncommand = []\n").is_err());
        assert!(parse("").is_err());
        assert!(parse("[[guest]]\ncommand=[\"a\"]\n[[guest]]\ncommand=[\"a\"]\n").is_err());
    }
}
